// File: pool/placement/fgd.h
//
// Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
// Workloads with Fragmentation Gradient Descent", USENIX ATC '23), re-derived from the paper and
// reproducing its simulator's decisions: place each task where it increases the node's expected
// fragmentation (FgdNodeFragmentation against the workload's typical shapes) the least.
//
// Score of a node = trunc(100 · sigmoid((F_before − F_after) / 1000)), not renormalised; ties go to
// the lowest tie rank. A sharing task is tried on every GPU that fits and takes the best one (the
// lowest index among equals); other tasks take free GPUs in index order.
#ifndef GPUPOOL_POOL_PLACEMENT_FGD_H_
#define GPUPOOL_POOL_PLACEMENT_FGD_H_

#include <memory>

#include "pool/placement/placement_policy.h"
#include "pool/placement/shape_distribution.h"

namespace gpupool::pool::placement {

// `workload` is the target workload's shape distribution (the paper: its typical pods, built from
// the trace's pod list with CPU-only pods included and 95% coverage).
std::unique_ptr<PlacementPolicy> MakeFgdPolicy(ShapeDistribution workload);

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_FGD_H_
