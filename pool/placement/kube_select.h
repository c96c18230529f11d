// File: pool/placement/kube_select.h
//
// The last two steps of the Kubernetes scheduling framework as the FGD paper's simulator runs them,
// so that the baselines decide exactly as published: scores are integers, a policy that asks for it
// has them min-max renormalised to 0..100 over the feasible nodes (integer arithmetic; all 0 when
// they are equal), and the highest score wins with ties going to the lowest tie rank (the
// lexicographically smallest node name).
#ifndef GPUPOOL_POOL_PLACEMENT_KUBE_SELECT_H_
#define GPUPOOL_POOL_PLACEMENT_KUBE_SELECT_H_

#include <cstdint>
#include <span>

#include "pool/placement/cluster_state.h"

namespace gpupool::pool::placement {

inline constexpr int64_t kMaxNodeScore = 100;

// In place: score -> (score - lowest) * 100 / (highest - lowest), or 0 for all when equal.
void NormalizeMinMax(std::span<int64_t> scores);

// The node with the highest score, ties to the lowest tie rank; -1 when `nodes` is empty.
int SelectHighest(const ClusterView& cluster, std::span<const int> nodes,
                  std::span<const int64_t> scores);

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_KUBE_SELECT_H_
