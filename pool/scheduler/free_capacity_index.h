// File: pool/scheduler/free_capacity_index.h
//
// An index of the free capacity of one candidate set (the GPUs of one quota group that a family
// of requests may use), kept up to date as leases are granted and released, so that placing a
// request on the live state does not scan every GPU of the pool.
//
//   FreeCapacityIndex index(topology, candidates, state);
//   state.Take(g, shape); index.RefreshNode(state, topology.gpus()[g].node);
//   if (index.Answers(request, options)) gpus = index.Place(state, request, options);
//
// Contract: Place returns exactly what PlaceRequest (placement.h) returns for the same state,
// request, candidates and options: the same GPUs in the same order, or nullopt. The scan stays the
// reference and the fallback (Answers is false for first-fit, for multi-slot fractions with no
// topology and for requests with host CPU or memory); tests compare the two after random carve/release/health/reservation sequences.
//
// How: two views of the candidates, one respecting gang reservations and one ignoring them (what
// the scheduler's diagnosis asks). In a view, a GPU is odd when options can change whether it is
// usable in ways the view does not fix: unhealthy, or (respecting reservations) reserved for a
// waiting gang, whose backfill verdict depends on the request. (Room a preemption holds for a
// request is taken out of the state, so the index sees it as used.) A domain (a node, or an NVLink island
// inside one node) with no odd GPU is "regular": whether a slot fits there depends on room alone,
// and its packing score is its node's free compute. Regular domains are kept ordered by (node free
// compute, position), bucketed by how many untouched GPUs they hold, and regular GPUs with room by
// (free compute, node free compute, position): a query reads the first entry that fits. The few
// domains holding an odd GPU are evaluated one by one with the same per-domain fill the scan uses.
//
// Every change to a GPU's room, health or reservations must be followed by RefreshNode for its
// node before the next query (GPUs outside the candidate set too: their room counts in their
// node's score). Memory: O(candidate GPUs). Thread-compatible; owned by the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_FREE_CAPACITY_INDEX_H_
#define GPUPOOL_POOL_SCHEDULER_FREE_CAPACITY_INDEX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "pool/scheduler/capacity.h"
#include "pool/scheduler/domain_fill.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

class FreeCapacityIndex {
 public:
  // `candidates`: GPU positions in ascending order. `topology` must outlive the index; `state`
  // is read once here and again at every RefreshNode and Place.
  FreeCapacityIndex(const PoolTopology& topology, std::vector<int> candidates,
                    const CapacityState& state);

  // Re-reads the GPUs of `node` from `state`. Cheap (the node's GPUs); a no-op for a node with
  // no candidate GPU.
  void RefreshNode(const CapacityState& state, int node);

  // Whether Place can answer this request with these options.
  bool Answers(const LeaseRequest& r, const PlacementOptions& options) const;
  // What PlaceRequest(topology, state, r, candidates, options) returns. Requires Answers(r,
  // options) and an index refreshed since `state` last changed.
  std::optional<std::vector<int>> Place(const CapacityState& state, const LeaseRequest& r,
                                        const PlacementOptions& options) const;

  // Free compute of the schedulable candidate GPUs, in milli-GPUs.
  int64_t SchedulableFreeMilli() const { return schedulable_free_milli_; }

 private:
  // A partition of the candidates into domains, each inside one node, numbered in ascending
  // order of their GPUs (so domain order is the scan's tie order).
  struct Domains {
    std::vector<std::vector<int>> gpus;  // candidate GPUs of each domain, ascending
    std::vector<int> node;
    std::vector<std::vector<int>> of_node;  // node -> its domains
    // Kept up to date by RefreshNode.
    std::vector<int64_t> free;       // free compute of the domain's node (all its GPUs)
    std::vector<int> untouched;      // untouched candidate GPUs present in the view
    std::vector<char> special;       // holds an odd GPU
    std::vector<std::set<std::pair<int64_t, int>>> by_untouched;  // [u]: (free, domain), regular
    std::set<std::pair<int64_t, int>> by_free;                    // regular: (free, domain)
    std::set<int> specials;
  };
  // (free compute, node free compute, position) of a GPU with room in a regular node domain.
  using Room = std::tuple<int, int64_t, int>;
  struct View {
    bool ignore_reservations = false;
    Domains nodes;
    Domains islands;  // when islands_indexed_ and not islands_are_nodes_
    std::set<Room> rooms;
    std::vector<int> room_of;              // per GPU position: free compute entered, or -1
    std::vector<int64_t> room_node_free;   // ... and the node free compute entered with it
  };

  static Domains Partition(const PoolTopology& topology, const std::vector<int>& candidates,
                           bool by_island);
  void InitView(View& view, bool ignore_reservations, const Domains& nodes,
                const Domains& islands);
  void RefreshDomains(const CapacityState& state, const View& view, Domains& domains, int node,
                      std::set<Room>* rooms, std::vector<int>* room_of,
                      std::vector<int64_t>* room_node_free);
  // Whether GPU g is odd in `view` (see the file comment).
  static bool Odd(const View& view, const GpuState& s) {
    return !s.schedulable || (!view.ignore_reservations && s.gang_reserved_for != 0);
  }
  const View& ViewFor(const PlacementOptions& options) const {
    return options.ignore_reservations ? relaxed_ : strict_;
  }
  const Domains& DomainsFor(const View& view, GangTopology topology) const;
  std::optional<std::vector<int>> PlaceInDomains(const View& view, const Domains& domains,
                                                 const CapacityState& state,
                                                 const LeaseRequest& r,
                                                 const PlacementOptions& options) const;
  std::optional<std::vector<int>> PlaceWholeAnywhere(const View& view, const CapacityState& state,
                                                     const LeaseRequest& r,
                                                     const PlacementOptions& options) const;
  std::optional<std::vector<int>> PlaceFractionAnywhere(const View& view,
                                                        const CapacityState& state,
                                                        const LeaseRequest& r,
                                                        const PlacementOptions& options) const;

  // Constant after construction.
  const PoolTopology* topology_;
  std::vector<int> candidates_;
  // Islands are indexed when every island lies in one node and islands do not interleave (else
  // the scan's tie order could not be read from a static order); they are the node domains when
  // the islands are the nodes.
  bool islands_indexed_ = false;
  bool islands_are_nodes_ = false;

  // Kept up to date by RefreshNode.
  View strict_;   // reservations respected
  View relaxed_;  // reservations ignored
  std::vector<int> schedulable_free_of_;  // per GPU position: its part of the sum below
  int64_t schedulable_free_milli_ = 0;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_FREE_CAPACITY_INDEX_H_
