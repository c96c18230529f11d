// File: pool/scheduler/domain_fill.h
//
// The two steps of placement that every placement path shares, so the scanning placement
// (placement.h) and the indexed one (free_capacity_index.h) cannot drift apart:
//   - SlotUsable: may one slot of the request go on GPU g now (health, reservations, room)?
//   - FillDomain: the packing (or first-fit) fill of one domain (a node, an NVLink island or the
//     whole candidate set) on scratch copies of its GPUs' free capacity.
//
// Pure functions of a read-only state; internal to pool/scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_DOMAIN_FILL_H_
#define GPUPOOL_POOL_SCHEDULER_DOMAIN_FILL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "pool/scheduler/capacity.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

struct PlacementOptions {
  bool ignore_health = false;        // "would it fit if the unhealthy GPUs were healthy?"
  bool ignore_reservations = false;  // "would it fit without others' gang reservations?"
  bool ignore_gang_reservations = false;
  int64_t now_s = 0;                 // for backfill: does the request end before a reservation?
  uint64_t owner = 0;                // the request's handle: its own gang reservation is usable
  bool first_fit = false;            // the baseline policy instead of packing
  bool ignore_host = false;          // "would it fit if its nodes had the CPU and memory?"
  // No slot on a spare GPU (SpareGpu): a request placed beside a spare reserve that it may not
  // take (spare_reserve.h). Only the scan answers it.
  bool avoid_spare = false;
  // For the scheduler, not the filter: "would it fit if the spare reserve were open to it?"
  bool ignore_spare_reserve = false;
};

// A GPU a spare reserve counts as free (spare_reserve.h): schedulable and untouched (room a
// preemption holds for a request is taken, so a GPU holding any is touched).
inline bool SpareGpu(const CapacityState& state, int g) {
  return state[g].schedulable && state.Untouched(g);
}

// Whether one slot of `r` may go on GPU `g` of `state` under `options`: GpuOpenTo and room.
bool SlotUsable(const CapacityState& state, int g, const LeaseRequest& r,
                const PlacementOptions& options);
// Everything SlotUsable asks but room: health and reservations (with backfill). The move planner
// asks it of GPUs it would make room on.
bool GpuOpenTo(const CapacityState& state, int g, const LeaseRequest& r,
               const PlacementOptions& options);

// A GPU is plain when no option can change whether it is usable: healthy and reserved for no
// gang. Only room then decides (what the free-capacity index keeps ordered).
inline bool PlainGpu(const GpuState& s) { return s.schedulable && s.gang_reserved_for == 0; }

struct Filled {
  std::vector<int> gpus;  // one GPU position per slot
  int64_t stranded = 0;   // compute left free on the touched nodes (lower packs better)
};

// Fills `domain` (usable GPUs, ascending) greedily with the request's slots, each within its
// node's host CPU and memory (counting the fill's own earlier slots): packing puts each
// slot on the tightest GPU, then on the node with the least free compute, then the lowest
// position; `first_fit` on the lowest position that fits. nullopt when the slots do not all fit.
std::optional<Filled> FillDomain(const PoolTopology& topology, const CapacityState& state,
                                 const std::vector<int>& domain, const LeaseRequest& r,
                                 bool first_fit, bool ignore_host = false);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_DOMAIN_FILL_H_
