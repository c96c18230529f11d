// File: pool/scheduler/placement.h
//
// Where the slots of one request go, as a pure function of the capacity view: filter the GPUs
// (model, labels, memory, NVLink, health, reservations), split them into the domains the gang
// topology allows (the whole pool, each node, or each NVLink island), fill each domain greedily,
// and keep the domain that leaves the least capacity stranded.
//
// The packing rule, and why: a fraction goes to the GPU it fills most tightly, and whole GPUs go
// to the nodes with the fewest free GPUs, so partly used GPUs fill up first and empty GPUs and
// nodes stay empty for whole-GPU work and large gangs (fragmentation is the enemy of gangs).
//
// Nothing here mutates the view: the preemption planner asks "what if" on a copy.
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
  int64_t now_s = 0;                 // for backfill: does the request end before a reservation?
};

// Static constraints only: model, labels, memory, NVLink, quota group.
bool GpuMatches(const GpuCapacity& gpu, const LeaseRequest& request, const std::string& group);

// One GPU position per slot, or nullopt when the request does not fit now.
std::optional<std::vector<int>> PlaceRequest(const Capacity& capacity, const LeaseRequest& request,
                                             const std::string& group,
                                             const PlacementOptions& options = {});

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_PLACEMENT_H_
