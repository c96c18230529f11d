// File: runtime/gpu/device_copy.h
//
// Synchronous copies between device and host memory, for checkpoints of device state (staged
// through host memory). On a simulated GPU (cuda_device < 0) the "device" memory is host memory
// and these are memcpy.
#ifndef GPUPOOL_RUNTIME_GPU_DEVICE_COPY_H_
#define GPUPOOL_RUNTIME_GPU_DEVICE_COPY_H_

#include <cstdint>

#include "absl/status/status.h"

namespace gpupool::runtime {

absl::Status CopyDeviceToHost(void* host, const void* device, uint64_t bytes, int cuda_device);
absl::Status CopyHostToDevice(void* device, const void* host, uint64_t bytes, int cuda_device);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_GPU_DEVICE_COPY_H_
