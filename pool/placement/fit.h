// File: pool/placement/fit.h
//
// The filter step every policy shares, and the in-node GPU choices of the reference simulator
// (Kubernetes' NodeResourcesFit plus the Open-Gpu-Share filter and reserve). A node fits a request
// when it has the CPU and memory, an allowed GPU model, and `num_gpu` distinct GPUs each with at
// least `gpu_milli` free.
#ifndef GPUPOOL_POOL_PLACEMENT_FIT_H_
#define GPUPOOL_POOL_PLACEMENT_FIT_H_

#include <cstdint>
#include <span>

#include "pool/placement/cluster_state.h"
#include "pool/placement/decision.h"
#include "pool/placement/pod_request.h"

namespace gpupool::pool::placement {

// Number of GPUs with at least `milli` free.
int CountGpusWithAtLeast(std::span<const int16_t> gpu_free, int milli);

// Sum of free milli over all GPUs of a node.
int64_t TotalGpuFree(std::span<const int16_t> gpu_free);

bool GpusFit(std::span<const int16_t> gpu_free, const PodRequest& request);

bool NodeFits(const ClusterView& cluster, int node, const PodRequest& request);

// The tightest GPU that still fits `milli` (least free, lowest index on ties), or -1.
int TightestGpu(std::span<const int16_t> gpu_free, int milli);

// The first `request.num_gpu` GPUs in index order with `gpu_milli` free (for whole-GPU requests,
// the first free GPUs). Requires GpusFit.
GpuIndices FirstGpusInIndexOrder(std::span<const int16_t> gpu_free, const PodRequest& request);

// The simulator's default in-node choice: a one-GPU request goes to the tightest GPU, a multi-GPU
// request takes GPUs in index order. Requires GpusFit; empty for a CPU-only request.
GpuIndices DefaultGpuChoice(std::span<const int16_t> gpu_free, const PodRequest& request);

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_FIT_H_
