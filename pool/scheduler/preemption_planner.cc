#include "pool/scheduler/preemption_planner.h"

#include <algorithm>
#include <numeric>

namespace gpupool::pool {

std::optional<std::vector<size_t>> PlanPreemption(
    const std::vector<PreemptionCandidate>& candidates, int64_t own_quota_to_free,
    const std::function<bool(const std::vector<size_t>& freed)>& fits) {
  if (candidates.empty()) return std::nullopt;
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t i, size_t j) {
    const PreemptionCandidate& a = candidates[i];
    const PreemptionCandidate& b = candidates[j];
    if (a.last != b.last) return b.last;
    if (a.cost != b.cost) return a.cost < b.cost;
    if (a.gpus != b.gpus) return a.gpus > b.gpus;  // fewer victims: free more per victim
    return a.id < b.id;
  });
  const auto works = [&](const std::vector<size_t>& freed) {
    int64_t own = 0;
    for (size_t i : freed) own += candidates[i].own_milli;
    return own >= own_quota_to_free && fits(freed);
  };
  const auto prefix = [&](size_t n) { return std::vector<size_t>(order.begin(), order.begin() + static_cast<long>(n)); };
  if (!works(order)) return std::nullopt;
  size_t lo = 0, hi = order.size();  // works(prefix(hi)) holds
  while (lo + 1 < hi) {
    size_t mid = (lo + hi) / 2;
    (works(prefix(mid)) ? hi : lo) = mid;
  }
  std::vector<size_t> chosen = prefix(hi);
  for (size_t k = chosen.size(); k-- > 0;) {
    std::vector<size_t> without = chosen;
    without.erase(without.begin() + static_cast<long>(k));
    if (works(without)) chosen = std::move(without);
  }
  return chosen;
}

}  // namespace gpupool::pool
