// File: pool/sim/packing_ceiling.h
//
// How much of a protocol workload (workload.h) any placement could allocate, judged from the
// GPU-sharing pods alone. It answers "is this target reachable at all?" before anyone tunes a
// policy towards it.
//
// At i% arrival the pods that have arrived ask for i% of the cluster's GPUs. A sharing pod
// (one GPU, gpu_milli < 1000) can only share its GPU with other sharing pods, so the GPUs the
// sharing pods occupy are worth at most their demand, and whatever room is left on them is lost
// to every whole-GPU pod. If every sharing pod that arrived is placed on `bins` GPUs:
//
//   allocated <= share + min(whole, gpus - bins)      (share + whole = arrived demand)
//
// Two values of `bins` are used:
//  - bins_lower_bound: Martello and Toth's L2 lower bound on the number of unit bins the sharing
//    pods need. No packing uses fewer, so `ceiling_pct_bound` is an upper bound on the allocation
//    of any placement that places every sharing pod (relaxing CPU, memory, GPU models and node
//    boundaries only raises it);
//  - bins_ffd: what First-Fit-Decreasing needs, close to optimal for these sizes (within
//    11/9 OPT + 6/9 in theory, usually equal). `ceiling_pct_ffd` is an estimate, not a bound.
// A placement that refuses sharing pods it could place is not covered: the protocol places every
// pod it can.
#ifndef GPUPOOL_POOL_SIM_PACKING_CEILING_H_
#define GPUPOOL_POOL_SIM_PACKING_CEILING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

struct PackingCeiling {
  int64_t cluster_gpus = 0;
  int64_t arrived_milli = 0;     // GPU demand of the pods arrived at the percentage
  int64_t share_pods = 0;        // sharing pods among them
  int64_t share_milli = 0;       // and their demand
  int64_t bins_lower_bound = 0;  // L2: no packing of the sharing pods uses fewer GPUs
  int64_t bins_ffd = 0;          // GPUs First-Fit-Decreasing uses for them
  double ceiling_pct_bound = 0;  // 100 x the allocation bound above / cluster GPUs
  double ceiling_pct_ffd = 0;
};

// Unit bins of 1000 milli. Sizes must be in 1..1000.
int64_t FirstFitDecreasingBins(std::vector<int> sizes_milli);
int64_t BinCountLowerBound(std::span<const int> sizes_milli);

// The ceiling at `percent` arrival of the protocol workload for `seed` (built exactly as
// RunProtocolSeed builds it, so the same pods arrive in the same order).
absl::StatusOr<PackingCeiling> EstimatePackingCeiling(std::span<const NodeCapacity> nodes,
                                                      std::span<const PodSpec> pods, double tune,
                                                      uint64_t seed, int percent = 100);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_PACKING_CEILING_H_
