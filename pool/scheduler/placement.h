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
// Nothing here mutates the state: the preemption planner asks "what if" on a copy. This scan is
// the reference: the scheduler answers the same question on its live state through a
// FreeCapacityIndex (free_capacity_index.h), which must return exactly what this returns.
#ifndef GPUPOOL_POOL_SCHEDULER_PLACEMENT_H_
#define GPUPOOL_POOL_SCHEDULER_PLACEMENT_H_

#include <optional>
#include <string>
#include <vector>

#include "pool/scheduler/capacity.h"
#include "pool/scheduler/domain_fill.h"  // PlacementOptions
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

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
