#include "pool/placement/kube_select.h"

#include <algorithm>
#include <cassert>

namespace gpupool::pool::placement {

void NormalizeMinMax(std::span<int64_t> scores) {
  if (scores.empty()) return;
  const auto [lo, hi] = std::minmax_element(scores.begin(), scores.end());
  const int64_t lowest = *lo;
  const int64_t range = *hi - lowest;
  for (int64_t& s : scores) s = range == 0 ? 0 : (s - lowest) * kMaxNodeScore / range;
}

int SelectHighest(const ClusterView& cluster, std::span<const int> nodes,
                  std::span<const int64_t> scores) {
  assert(nodes.size() == scores.size());
  int best = -1;
  int64_t best_score = 0;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const int n = nodes[k];
    if (best < 0 || scores[k] > best_score ||
        (scores[k] == best_score && cluster.tie_rank(n) < cluster.tie_rank(best))) {
      best = n;
      best_score = scores[k];
    }
  }
  return best;
}

}  // namespace gpupool::pool::placement
