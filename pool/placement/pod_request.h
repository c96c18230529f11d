// File: pool/placement/pod_request.h
//
// The resource shape a placement policy places: CPU and memory on one node plus `num_gpu` GPUs of
// that node, each with `gpu_milli` (out of 1000) of its capacity. A sharing request takes part of
// one GPU (num_gpu == 1, gpu_milli < 1000); a multi-GPU request takes whole GPUs of one node.
#ifndef GPUPOOL_POOL_PLACEMENT_POD_REQUEST_H_
#define GPUPOOL_POOL_PLACEMENT_POD_REQUEST_H_

#include <cstdint>

#include "pool/placement/model_set.h"

namespace gpupool::pool::placement {

// One GPU's capacity, in thousandths: the unit of every GPU quantity in this folder.
inline constexpr int kMilliPerGpu = 1000;

struct PodRequest {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;  // per GPU; 1..1000 when num_gpu > 0, 0 otherwise
  ModelSet models = ModelSet::Any();

  bool uses_gpu() const { return num_gpu > 0; }
  bool is_sharing() const { return num_gpu == 1 && gpu_milli < kMilliPerGpu; }
  int64_t gpu_demand_milli() const { return int64_t{num_gpu} * gpu_milli; }
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_POD_REQUEST_H_
