// best-fit: prefer the node left with the least CPU and GPU after the request. The float arithmetic
// follows the reference simulator term by term so that truncation to an integer lands the same.
// A node that counts no CPU (a pool node that declares none) has its CPU taken to be as free as its
// GPUs: it is judged by its GPUs, and a CPU-only request does not take it for the tightest node.
#include "pool/placement/baselines.h"
#include "pool/placement/fit.h"
#include "pool/placement/kube_scoring_policy.h"
#include "pool/placement/kube_select.h"

namespace gpupool::pool::placement {
namespace {

class BestFitPolicy final : public KubeScoringPolicy {
 public:
  BestFitPolicy() : KubeScoringPolicy(/*normalize_scores=*/true) {}

 protected:
  int64_t Score(const ClusterView& cluster, int node, const PodRequest& request) override {
    const double cpu_left = static_cast<double>(cluster.cpu_free(node) - request.cpu_milli);
    const double gpu_left =
        static_cast<double>(TotalGpuFree(cluster.gpu_free(node)) - request.gpu_demand_milli());
    double waste = 0;  // in [0, 1], lower is better
    // A node that counts no CPU: its CPU taken to be as free as its GPUs (judged by its GPUs).
    waste += (cluster.cpu_counted(node) ? cpu_left / kMaxSpecCpuMilli : gpu_left / kMaxSpecGpuMilli) * 0.5;
    waste += gpu_left / kMaxSpecGpuMilli * 0.5;
    return static_cast<int64_t>((1.0 - waste) * static_cast<double>(kMaxNodeScore));
  }
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeBestFitPolicy() { return std::make_unique<BestFitPolicy>(); }

}  // namespace gpupool::pool::placement
