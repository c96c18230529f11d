// File: pool/scheduler/placement.h
//
// Where the slots of one request go, as a pure function of the topology and a capacity state:
// filter the candidate GPUs (health, reservations, room), split them into the domains the gang
// topology allows (the whole pool, each node, or each NVLink island), fill each domain greedily,
// and keep the domain that leaves the least capacity stranded.
//
// The packing rule, and why: a fraction goes to the GPU it fills most tightly, and whole GPUs go
// to the nodes with the least free compute, so partly used GPUs fill up first and empty GPUs and
// nodes stay empty for whole-GPU work and large gangs (fragmentation is the enemy of gangs).
// `first_fit` replaces it with the baseline every scheduler starts from: the lowest-numbered GPUs
// and domains that fit.
//
// Nothing here mutates the state: the preemption planner asks "what if" on a copy.
#ifndef GPUPOOL_POOL_SCHEDULER_PLACEMENT_H_
#define GPUPOOL_POOL_SCHEDULER_PLACEMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "pool/scheduler/capacity.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

struct PlacementOptions {
  bool ignore_health = false;        // "would it fit if the unhealthy GPUs were healthy?"
  bool ignore_reservations = false;  // "would it fit without others' reservations?"
  bool ignore_gang_reservations = false;
  int64_t now_s = 0;                 // for backfill: does the request end before a reservation?
  uint64_t owner = 0;                // the request's handle: its own reservations are usable
  bool first_fit = false;            // the baseline policy instead of packing
};

// Static constraints only: model, labels, memory, NVLink, quota group.
bool GpuMatches(const GpuStatic& gpu, const LeaseRequest& request, const std::string& group);

// One GPU position per slot, or nullopt when the request does not fit now. `candidates` are the
// GPUs that match the request statically (GpuMatches), in ascending order.
std::optional<std::vector<int>> PlaceRequest(const PoolTopology& topology,
                                             const CapacityState& state,
                                             const LeaseRequest& request,
                                             const std::vector<int>& candidates,
                                             const PlacementOptions& options = {});

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_PLACEMENT_H_
