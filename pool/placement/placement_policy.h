// File: pool/placement/placement_policy.h
//
// The one-method interface every placement policy implements: given a read-only view of the
// cluster and one request, filter the nodes that fit, score them, and select one node and its GPUs.
// Policies never modify the cluster; the caller applies the decision (or not: a preemption
// planner may ask "what if" on a copy).
//
//   std::unique_ptr<PlacementPolicy> policy = *MakePolicy("best-fit", context);
//   Decision d = policy->Decide(state.view(), request);
//
// Thread-safety: a policy object is used by one thread at a time. Decide may update private
// caches (keyed by node generation) or a private random stream, never anything shared.
#ifndef GPUPOOL_POOL_PLACEMENT_PLACEMENT_POLICY_H_
#define GPUPOOL_POOL_PLACEMENT_PLACEMENT_POLICY_H_

#include "pool/placement/cluster_state.h"
#include "pool/placement/decision.h"
#include "pool/placement/pod_request.h"

namespace gpupool::pool::placement {

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;

  // Returns the chosen node and GPUs, or Decision::Unschedulable() when no node fits now.
  // Deterministic: the same view, request and policy history give the same decision.
  virtual Decision Decide(const ClusterView& cluster, const PodRequest& request) = 0;

  // A request the cluster received, told once, when it arrives (before any Decide for it, and
  // whether or not it is ever placed). Policies that learn the expected workload online
  // (online_shapes.h) count it; the others ignore it.
  virtual void Observe(const PodRequest& request) {}

  // Whether Decide depends on each node only through its state (model, free and total CPU,
  // memory and GPU shares) and tie rank: then a pre-filter may hand it one node per distinct
  // state, the one first in tie order, and the decision is the one over all nodes. (Not for a
  // policy that draws among feasible nodes at random.)
  virtual bool ScoresByNodeState() const { return false; }
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_PLACEMENT_POLICY_H_
