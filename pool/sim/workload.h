// File: pool/sim/workload.h
//
// The FGD paper's workload for one seed (traces/openb/README.md, "Workload"): starting from the
// pod list, if its total GPU demand is below `tune` x the cluster's GPU capacity, pods drawn at
// random with replacement are appended until the next one would pass it; if above, random pods are
// removed until it no longer is. Then the list is shuffled. All draws come from `random`, in that
// order, so a seed fixes the workload.
#ifndef GPUPOOL_POOL_SIM_WORKLOAD_H_
#define GPUPOOL_POOL_SIM_WORKLOAD_H_

#include <cstdint>
#include <span>
#include <vector>

#include "pool/placement/random_stream.h"
#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

struct ProtocolWorkload {
  std::vector<int> arrivals;  // indices into the pod list, in arrival order
  int64_t demand_milli = 0;   // total GPU demand of `arrivals`
  int appended = 0;           // pods drawn with replacement and added
  int removed = 0;            // pods of the list taken out
};

// `tune` <= 0 keeps the list as it is (still shuffled).
ProtocolWorkload BuildProtocolWorkload(std::span<const PodSpec> pods, int64_t cluster_gpu_milli,
                                       double tune, placement::RandomStream& random);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_WORKLOAD_H_
