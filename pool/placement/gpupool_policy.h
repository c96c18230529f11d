// File: pool/placement/gpupool_policy.h
//
// gpupool's default placement policy: fragmentation-aware packing.
//
// For every node that fits, and for a sharing task every distinct GPU it could go to, the policy
// measures how much the placement would increase the node's unusable GPU capacity under the
// expected workload (fragmentation_model.h: FGD's next-task view averaged with a fill-the-node
// view, CPU- and memory-aware, over every task shape of the workload rather than the most common
// 95%). It then prefers the smallest increase. Increases that differ by less than a few percent of
// a GPU are treated as equal — the score is FGD's trunc(100·sigmoid(−Δ/1000)) — and equal scores
// go to the node first in tie order. That coarse-graining is deliberate: among near-equivalent
// choices, a consistent node order packs tasks onto nodes already in use and keeps the others
// whole for multi-GPU and CPU-heavy tasks, which measures much better than chasing differences of
// a few milli-GPUs across the whole cluster.
//
// The expected workload is learned online from the requests the policy is told of (Observe), in
// arrival order, never from a trace in advance (online_shapes.h); until it has seen any, every
// node scores alike and the tie order decides.
//
// Per decision the work is one scan of the nodes; node fragmentation is cached by node generation
// and by node state (identical nodes in identical states are scored once).
#ifndef GPUPOOL_POOL_PLACEMENT_GPUPOOL_POLICY_H_
#define GPUPOOL_POOL_PLACEMENT_GPUPOOL_POLICY_H_

#include <memory>

#include "pool/placement/placement_policy.h"

namespace gpupool::pool::placement {

std::unique_ptr<PlacementPolicy> MakeGpupoolPolicy();

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_GPUPOOL_POLICY_H_
