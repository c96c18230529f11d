#include "pool/placement/fgd.h"

#include <cmath>
#include <vector>

#include "pool/placement/fgd_fragmentation.h"
#include "pool/placement/fit.h"
#include "pool/placement/kube_select.h"

namespace gpupool::pool::placement {
namespace {

int64_t FgdScore(double before, double after) {
  const double x = (before - after) / 1000;
  return static_cast<int64_t>(1.0 / (1.0 + std::exp(-x)) * static_cast<double>(kMaxNodeScore));
}

class FgdPolicy final : public PlacementPolicy {
 public:
  explicit FgdPolicy(ShapeDistribution workload) : workload_(std::move(workload)) {}
  bool ScoresByNodeState() const override { return true; }

  Decision Decide(const ClusterView& cluster, const PodRequest& request) override {
    if (static_cast<int>(cached_.size()) < cluster.state_size()) cached_.resize(cluster.state_size());
    int best_node = -1;
    int best_gpu = -1;
    int64_t best_score = 0;
    for (int n = 0; n < cluster.size(); ++n) {
      if (!NodeFits(cluster, n, request)) continue;
      int gpu = -1;
      const int64_t score = ScoreNode(cluster, n, request, &gpu);
      if (best_node < 0 || score > best_score ||
          (score == best_score && cluster.tie_rank(n) < cluster.tie_rank(best_node))) {
        best_node = n;
        best_gpu = gpu;
        best_score = score;
      }
    }
    if (best_node < 0) return Decision::Unschedulable();
    if (request.is_sharing()) return Decision::Placed(best_node, {best_gpu});
    return Decision::Placed(best_node, DefaultGpuChoice(cluster.gpu_free(best_node), request));
  }

 private:
  struct CachedFragmentation {
    uint64_t generation = 0;
    double value = 0;
  };

  double Current(const ClusterView& cluster, int n) {
    CachedFragmentation& c = cached_[cluster.id(n)];
    if (c.generation != cluster.generation(n)) {
      c.generation = cluster.generation(n);
      c.value = FgdNodeFragmentation(cluster.model_id(n), cluster.cpu_free(n), cluster.gpu_free(n),
                                     workload_.shapes());
    }
    return c.value;
  }

  // The node's score; for a sharing request also the GPU that achieves it.
  int64_t ScoreNode(const ClusterView& cluster, int n, const PodRequest& request, int* gpu) {
    const double before = Current(cluster, n);
    std::span<const int16_t> free = cluster.gpu_free(n);
    const int64_t cpu_after = cluster.cpu_free(n) - request.cpu_milli;
    std::vector<int16_t>& after = scratch_;
    after.assign(free.begin(), free.end());
    const int num_gpus = static_cast<int>(free.size());
    std::span<const int16_t> after_span(after);

    if (request.is_sharing()) {
      int64_t best = 0;
      for (int g = 0; g < num_gpus; ++g) {
        if (free[g] < request.gpu_milli) continue;
        // GPUs with the same free share leave the node in the same state: score it once.
        bool seen = false;
        for (int h = 0; h < g && !seen; ++h) seen = free[h] == free[g] && free[h] >= request.gpu_milli;
        if (seen) continue;
        after[g] = static_cast<int16_t>(free[g] - request.gpu_milli);
        const double f = FgdNodeFragmentation(cluster.model_id(n), cpu_after, after_span,
                                              workload_.shapes());
        after[g] = free[g];
        const int64_t score = FgdScore(before, f);
        if (*gpu < 0 || score > best) {
          best = score;
          *gpu = g;
        }
      }
      return best;
    }
    if (request.uses_gpu()) {
      for (int g : DefaultGpuChoice(free, request)) {
        after[g] = static_cast<int16_t>(after[g] - request.gpu_milli);
      }
    }
    return FgdScore(before, FgdNodeFragmentation(cluster.model_id(n), cpu_after, after_span,
                                                 workload_.shapes()));
  }

  const ShapeDistribution workload_;
  std::vector<CachedFragmentation> cached_;  // per node, valid while its generation matches
  std::vector<int16_t> scratch_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeFgdPolicy(ShapeDistribution workload) {
  return std::make_unique<FgdPolicy>(std::move(workload));
}

}  // namespace gpupool::pool::placement
