// dot-product (Tetris, SIGCOMM '14, as the FGD paper configures it: CPU and total GPU merged into
// two dimensions, both scaled by the largest node spec). A small dot product between what the node
// has free and what the request asks means the request fills the node's scarcer dimension. A node
// that counts no CPU (a pool node that declares none) has its CPU taken to be as free as its GPUs.
#include "pool/placement/baselines.h"
#include "pool/placement/fit.h"
#include "pool/placement/kube_scoring_policy.h"
#include "pool/placement/kube_select.h"

namespace gpupool::pool::placement {
namespace {

class DotProductPolicy final : public KubeScoringPolicy {
 public:
  DotProductPolicy() : KubeScoringPolicy(/*normalize_scores=*/false) {}

 protected:
  int64_t Score(const ClusterView& cluster, int node, const PodRequest& request) override {
    const double node_gpu =
        static_cast<double>(TotalGpuFree(cluster.gpu_free(node))) / kMaxSpecGpuMilli;
    // A node that counts no CPU: its CPU taken to be as free as its GPUs.
    const double node_cpu =
        cluster.cpu_counted(node) ? static_cast<double>(cluster.cpu_free(node)) / kMaxSpecCpuMilli : node_gpu;
    const double pod_cpu = static_cast<double>(request.cpu_milli) / kMaxSpecCpuMilli;
    const double pod_gpu = static_cast<double>(request.gpu_demand_milli()) / kMaxSpecGpuMilli;
    double dot = 0;
    dot += node_cpu * pod_cpu;
    dot += node_gpu * pod_gpu;
    const double score = 1 - dot / 2;
    return static_cast<int64_t>(static_cast<double>(kMaxNodeScore) * score);
  }
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeDotProductPolicy() {
  return std::make_unique<DotProductPolicy>();
}

}  // namespace gpupool::pool::placement
