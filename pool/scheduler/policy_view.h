// File: pool/scheduler/policy_view.h
//
// The live scheduler's way into the placement policies of pool/placement: a ClusterState that
// mirrors, for one candidate set (the GPUs a family of requests may use), the free capacity the
// scheduler's filter leaves open, so that a policy (placement_policy.h: a read-only view in, a
// node and its GPUs out) chooses where a request goes, exactly as it does in the simulator.
//
//   PolicyView view(topology, candidates, state, models);
//   state.Take(g, shape); view.RefreshNode(state, topology.gpus()[g].node);
//   PolicyAnswer a = view.Place(policy, state, request, options);
//   if (!a.answered) ... place by the scan (placement.h) instead
//
// What the mirror shows: per node its free host CPU and memory (unbounded where the node declares
// none), and per candidate GPU its free compute when it is healthy and reserved for no gang, else
// nothing. That is exact for requests that cannot use a gang's reserved GPU and whose slots go on
// one node (a policy places a request on one node); Place says `answered = false` for the others —
// one that may backfill or overrule a gang's reservation, what-if questions
// (ignoring health or reservations), multi-node gangs, multi-slot fractions — and for the rare
// choice the mirror cannot check (a fraction's GPU memory), which the caller then places by the
// scan. A policy answer always passes the scheduler's own filter (SlotUsable) before it counts.
//
// The pre-filter: nodes in the same state (model, host capacity free and total, the multiset of
// their GPUs' free shares) score alike under a policy that scores by node state
// (PlacementPolicy::ScoresByNodeState), so such a policy is handed one node per distinct state,
// the first in tie order, which is the node it would have chosen among them. A pool of identical
// nodes then costs the policy as many evaluations as it has distinct states, not nodes.
//
// Thread-compatible; owned by the Scheduler, refreshed like the FreeCapacityIndex.
#ifndef GPUPOOL_POOL_SCHEDULER_POLICY_VIEW_H_
#define GPUPOOL_POOL_SCHEDULER_POLICY_VIEW_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "pool/placement/cluster_state.h"
#include "pool/placement/placement_policy.h"
#include "pool/scheduler/capacity.h"
#include "pool/scheduler/domain_fill.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

struct PolicyAnswer {
  bool answered = false;               // false: ask the scan
  std::optional<std::vector<int>> gpus;  // when answered: the GPUs, or nullopt for "no room now"
};

// The request as a placement policy sees it: its slots on one node, CPU and memory summed, its
// models by the pool's names (a catalogue name in any case resolves to the catalogue's spelling).
placement::PodRequest PodRequestOf(const LeaseRequest& r, const placement::ModelIndex& models);
// The same with any model allowed: what to ask of a view whose candidates already match.
placement::PodRequest PodShapeOf(const LeaseRequest& r);

class PolicyView {
 public:
  // `candidates`: GPU positions, ascending. `models` names every model of the topology (the
  // scheduler's index, shared by all its views so that ids agree). `topology` must outlive this.
  PolicyView(const PoolTopology& topology, const std::vector<int>& candidates,
             const CapacityState& state, const placement::ModelIndex& models);

  // Re-reads node `node` from `state`; a no-op for a node with no candidate GPU.
  void RefreshNode(const CapacityState& state, int node);

  PolicyAnswer Place(placement::PlacementPolicy& policy, const CapacityState& state,
                     const LeaseRequest& r, const PlacementOptions& options) const;

 private:
  bool Answers(const LeaseRequest& r, const PlacementOptions& options) const;

  // Constant after construction.
  const PoolTopology* topology_;
  std::vector<int> view_node_;               // topology node -> mirror node, or -1
  absl::flat_hash_map<std::string, int> view_of_name_;  // node name -> mirror node
  std::vector<std::vector<int>> node_gpus_;  // mirror node -> candidate GPU positions
  std::vector<int16_t> scratch_;

  // Kept up to date by RefreshNode.
  std::optional<placement::ClusterState> cluster_;  // unset only when the models overflow
  // Per GPU position, whether a gang reservation was last seen there (counted below).
  std::vector<char> seen_gang_;
  int gang_reserved_ = 0;            // candidate GPUs with a gang reservation
  // The pre-filter: mirror nodes by state, each set ordered by (tie rank, node).
  std::vector<std::string> state_of_;  // per mirror node, its key in by_state_
  absl::flat_hash_map<std::string, std::set<std::pair<int, int>>> by_state_;
  mutable std::vector<int> representatives_;  // scratch of Place
  mutable std::vector<std::pair<const void*, int>> preferred_;  // scratch: (state group, mirror node)
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_POLICY_VIEW_H_
