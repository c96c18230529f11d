// File: runtime/gpu/current_device_guard.h
//
// Restores the calling thread's current CUDA device on leaving a scope. The runtime switches
// devices to reach a lease's GPUs (copies, allocation, NCCL members); a task's own CUDA calls that
// name no device must not find another GPU current afterwards. Include from .cc/.cu files only.
#ifndef GPUPOOL_RUNTIME_GPU_CURRENT_DEVICE_GUARD_H_
#define GPUPOOL_RUNTIME_GPU_CURRENT_DEVICE_GUARD_H_

#include <cuda_runtime_api.h>

namespace gpupool::runtime {

class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard() { has_ = cudaGetDevice(&device_) == cudaSuccess; }
  ~CurrentDeviceGuard() {
    if (has_) cudaSetDevice(device_);
  }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int device_ = 0;
  bool has_ = false;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_GPU_CURRENT_DEVICE_GUARD_H_
