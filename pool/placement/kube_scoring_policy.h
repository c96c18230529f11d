// File: pool/placement/kube_scoring_policy.h
//
// The skeleton shared by the reference simulator's score plugins: filter every node (NodeFits),
// give each feasible node one integer score, optionally min-max renormalise, select the highest
// (ties to the lowest tie rank), then pick GPUs inside the chosen node. A subclass supplies the
// score and, if it differs from the default, the in-node GPU choice.
#ifndef GPUPOOL_POOL_PLACEMENT_KUBE_SCORING_POLICY_H_
#define GPUPOOL_POOL_PLACEMENT_KUBE_SCORING_POLICY_H_

#include <cstdint>
#include <vector>

#include "pool/placement/placement_policy.h"

namespace gpupool::pool::placement {

class KubeScoringPolicy : public PlacementPolicy {
 public:
  Decision Decide(const ClusterView& cluster, const PodRequest& request) final;
  // Scores are min-max normalised over the feasible nodes: duplicates change neither end.
  bool ScoresByNodeState() const override { return true; }

 protected:
  explicit KubeScoringPolicy(bool normalize_scores) : normalize_scores_(normalize_scores) {}

  // Called for feasible nodes only.
  virtual int64_t Score(const ClusterView& cluster, int node, const PodRequest& request) = 0;
  // Called once, on the selected node.
  virtual GpuIndices ChooseGpus(const ClusterView& cluster, int node, const PodRequest& request);

 private:
  const bool normalize_scores_;
  // Per-call scratch kept to avoid reallocating on every decision.
  std::vector<int> feasible_;
  std::vector<int64_t> scores_;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_KUBE_SCORING_POLICY_H_
