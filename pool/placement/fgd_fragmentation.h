// File: pool/placement/fgd_fragmentation.h
//
// FGD's fragmentation of one node (Weng et al., ATC '23, §4.2): for each task shape m of the target
// workload, the GPU capacity of the node that a task of shape m could not use, weighted by m's
// probability. If the node cannot host the task at all (wrong model, too few GPUs with enough free
// share, or too little CPU left) all of its free GPU capacity counts; if it can, the GPUs whose free
// share is below the task's count. The paper counts a CPU-only shape's view of the node as
// fragmented too; that adds the same amount to every node and is kept for fidelity.
#ifndef GPUPOOL_POOL_PLACEMENT_FGD_FRAGMENTATION_H_
#define GPUPOOL_POOL_PLACEMENT_FGD_FRAGMENTATION_H_

#include <cstdint>
#include <span>

#include "pool/placement/shape_distribution.h"

namespace gpupool::pool::placement {

// The expected fragmented GPU capacity, in milli-GPUs. The floating-point sums follow the
// reference implementation's order, so that the FGD score truncated to an integer matches it.
double FgdNodeFragmentation(int model_id, int64_t cpu_free, std::span<const int16_t> gpu_free,
                            std::span<const TaskShape> shapes);

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_FGD_FRAGMENTATION_H_
