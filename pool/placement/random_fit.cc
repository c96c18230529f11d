// random: a feasible node drawn uniformly, and for a sharing request a fitting GPU drawn uniformly
// inside it (whole-GPU requests take free GPUs in index order, as in the reference simulator).
#include <vector>

#include "pool/placement/baselines.h"
#include "pool/placement/fit.h"
#include "pool/placement/random_stream.h"

namespace gpupool::pool::placement {
namespace {

class RandomPolicy final : public PlacementPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : random_(seed) {}

  Decision Decide(const ClusterView& cluster, const PodRequest& request) override {
    feasible_.clear();
    for (int n = 0; n < cluster.size(); ++n) {
      if (NodeFits(cluster, n, request)) feasible_.push_back(n);
    }
    if (feasible_.empty()) return Decision::Unschedulable();
    const int node = feasible_[random_.Below(feasible_.size())];
    if (!request.is_sharing()) {
      return Decision::Placed(node, DefaultGpuChoice(cluster.gpu_free(node), request));
    }
    std::span<const int16_t> free = cluster.gpu_free(node);
    int chosen = -1;
    int fitting = 0;
    for (int g = 0; g < static_cast<int>(free.size()); ++g) {
      if (free[g] < request.gpu_milli) continue;
      ++fitting;
      if (random_.Below(fitting) == 0) chosen = g;  // reservoir sampling: uniform over fitting
    }
    return Decision::Placed(node, {chosen});
  }

 private:
  RandomStream random_;
  std::vector<int> feasible_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeRandomPolicy(uint64_t seed) {
  return std::make_unique<RandomPolicy>(seed);
}

}  // namespace gpupool::pool::placement
