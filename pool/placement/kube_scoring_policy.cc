#include "pool/placement/kube_scoring_policy.h"

#include "pool/placement/fit.h"
#include "pool/placement/kube_select.h"

namespace gpupool::pool::placement {

Decision KubeScoringPolicy::Decide(const ClusterView& cluster, const PodRequest& request) {
  feasible_.clear();
  scores_.clear();
  for (int n = 0; n < cluster.size(); ++n) {
    if (!NodeFits(cluster, n, request)) continue;
    feasible_.push_back(n);
    scores_.push_back(Score(cluster, n, request));
  }
  if (feasible_.empty()) return Decision::Unschedulable();
  if (normalize_scores_) NormalizeMinMax(scores_);
  const int node = SelectHighest(cluster, feasible_, scores_);
  return Decision::Placed(node, ChooseGpus(cluster, node, request));
}

GpuIndices KubeScoringPolicy::ChooseGpus(const ClusterView& cluster, int node,
                                         const PodRequest& request) {
  return DefaultGpuChoice(cluster.gpu_free(node), request);
}

}  // namespace gpupool::pool::placement
