// first-fit: the reference simulator gives every feasible node the maximum score, so the node that
// comes first in name order wins.
#include "pool/placement/baselines.h"
#include "pool/placement/kube_scoring_policy.h"
#include "pool/placement/kube_select.h"

namespace gpupool::pool::placement {
namespace {

class FirstFitPolicy final : public KubeScoringPolicy {
 public:
  FirstFitPolicy() : KubeScoringPolicy(/*normalize_scores=*/false) {}

 protected:
  int64_t Score(const ClusterView&, int, const PodRequest&) override { return kMaxNodeScore; }
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeFirstFitPolicy() { return std::make_unique<FirstFitPolicy>(); }

}  // namespace gpupool::pool::placement
