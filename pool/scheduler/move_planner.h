// File: pool/scheduler/move_planner.h
//
// Defragmentation by moving leases. Leases leave at random times, so a pool where every team is
// within its quota can still have no whole GPU (or no node with two) free: the free capacity is
// there in total, scattered over partly used GPUs. A guaranteed request then waits with the
// reason kFragmented, and neither reclaiming (no one borrows) nor preempting by priority (no
// lower priority in its team) can help. Nothing would, short of the leases ending on their own,
// hours later: its guarantee (admitted within its class's grace period) would be broken.
//
// The planner finds leases to move: single-GPU leases on the GPUs the request could use, such
// that once they are gone the request fits there, and each of them fits somewhere else that is
// free right now (or, for borrowed capacity the request may reclaim, simply leaves). The scheduler then revokes them (RevokeCause::kMove) with their grace period;
// each checkpoints, stops, and is placed again, on room that was free when the plan was made.
//
//   std::optional<MovePlan> plan = PlanMoves(topology, state, request, candidates, movable, opts);
//
// Choice: the plan losing the fewest GPU-seconds of work (since each mover's last checkpoint),
// then moving the fewest leases. A single-slot request considers every GPU it could use; a gang
// the cheapest GPUs of each domain its topology allows (each node, each NVLink island). Per GPU
// the cheapest leases that can go anywhere go first, until one slot of the request fits, and
// any that turn out unnecessary are dropped again, most expensive first.
//
// Why moves cannot chase each other round: a plan moves only leases that fit in capacity free
// now, for a request that does not, and names where each goes (MovePlan::destinations); the
// scheduler holds that room for the moved work until it comes back, so a second plan cannot
// count on the same room. Moving a mover back would need it to fit in free capacity, where it
// would simply have been placed. The scheduler adds a second guard: a lease is movable only once
// it has run for a while (SchedulerOptions::min_run_before_move_s), so no lease is moved again
// and again.
//
// A pure function of a read-only state, like PlaceRequest (placement.h); internal to
// pool/scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_MOVE_PLANNER_H_
#define GPUPOOL_POOL_SCHEDULER_MOVE_PLANNER_H_

#include <cstddef>
#include <optional>
#include <vector>

#include "pool/scheduler/capacity.h"
#include "pool/scheduler/domain_fill.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

// A lease that may be moved: it holds one slot on one GPU.
// A lease that may be moved (or, with `reclaim`, taken back): it holds one slot on one GPU.
struct MoveCandidate {
  int gpu = 0;                                 // the position it holds
  const LeaseRequest* request = nullptr;       // its shape and constraints (slot_count 1)
  const std::vector<int>* destinations = nullptr;  // where it may go: static matches, ascending
  double cost = 0;                             // GPU-seconds of work it would lose
  // Borrowed capacity the requester's guarantee may reclaim: it leaves without needing room
  // elsewhere (`destinations` is unused). Reclaiming alone cannot always free a whole slot (a
  // borrowed quarter beside three quarters within their team's quota); with moves it can.
  bool reclaim = false;
};

struct MovePlan {
  std::vector<int> gpus;          // where the request goes, one position per slot
  std::vector<size_t> moved;      // indexes into the candidates, at least one
  std::vector<int> destinations;  // where each of `moved` fits now, in the same order (-1: reclaimed)
  double cost = 0;                // the movers' lost work (GPU-seconds), summed
};

// The cheapest plan that lets `request` start on `candidates` (its static matches, ascending)
// after moving some of `movable`, or nullopt. `options` as for PlaceRequest (reservations,
// owner); the movers' new places honour every reservation.
std::optional<MovePlan> PlanMoves(const PoolTopology& topology, const CapacityState& state,
                                  const LeaseRequest& request, const std::vector<int>& candidates,
                                  const std::vector<MoveCandidate>& movable,
                                  const PlacementOptions& options);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_MOVE_PLANNER_H_
