// File: pool/placement/baselines.h
//
// The baseline policies of the FGD paper's evaluation (ATC '23, Fig. 9), decided exactly as its
// simulator decides them (see traces/openb/README.md, "How the paper's baselines decide"):
//
//   first-fit    every feasible node scores the same; the first node in name order wins.
//   best-fit     least CPU and GPU left over, Σ w_i (free_i - request_i) / maxSpec_i, reversed,
//                truncated, min-max renormalised.
//   random       a feasible node uniformly at random; a sharing request's GPU at random too.
//   dot-product  Tetris' alignment score: 1 - <free, request> / 2 over (CPU, GPU) normalised by
//                the largest node spec; the smaller the dot product, the better.
//
// Inside the chosen node, all but random put a one-GPU request on the tightest GPU that fits and a
// multi-GPU request on the first free GPUs in index order.
#ifndef GPUPOOL_POOL_PLACEMENT_BASELINES_H_
#define GPUPOOL_POOL_PLACEMENT_BASELINES_H_

#include <cstdint>
#include <memory>

#include "pool/placement/placement_policy.h"

namespace gpupool::pool::placement {

// The largest node specification in the paper's clusters, used to scale scores to [0, 1].
inline constexpr double kMaxSpecCpuMilli = 128000;
inline constexpr double kMaxSpecGpuMilli = 8000;

std::unique_ptr<PlacementPolicy> MakeFirstFitPolicy();
std::unique_ptr<PlacementPolicy> MakeBestFitPolicy();
std::unique_ptr<PlacementPolicy> MakeRandomPolicy(uint64_t seed);
std::unique_ptr<PlacementPolicy> MakeDotProductPolicy();

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_BASELINES_H_
