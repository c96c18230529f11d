// File: runtime/gpu/device_copy.h
//
// Synchronous copies between device and host memory: checkpoints of device state, and collectives
// and point-to-point messages of DeviceBuffers that are staged through host memory. On a simulated GPU (cuda_device < 0) the "device" memory is host memory
// and these are memcpy.
#ifndef GPUPOOL_RUNTIME_GPU_DEVICE_COPY_H_
#define GPUPOOL_RUNTIME_GPU_DEVICE_COPY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"

namespace gpupool::runtime {

// With a `stream` (a cudaStream_t), the copy is ordered after the work queued on it (a lease's
// stream is non-blocking: a plain cudaMemcpy would not wait for its kernels) and has completed on
// return.
absl::Status CopyDeviceToHost(void* host, const void* device, uint64_t bytes, int cuda_device,
                              void* stream = nullptr);
absl::Status CopyHostToDevice(void* device, const void* host, uint64_t bytes, int cuda_device,
                              void* stream = nullptr);

// Makes `cuda_device` the calling thread's current CUDA device (a task's thread, before the task
// runs: its kernels and the CUDA calls that name no device go to its lease's GPU). Nothing for a
// simulated GPU (< 0).
void MakeDeviceCurrent(int cuda_device);

// Page-locked host memory for staging device state (copies at full PCIe/NVLink speed, which
// pageable memory does not get); plain host memory when pinning is refused.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(uint64_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept;
  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool pinned() const { return pinned_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
  bool pinned_ = false;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_GPU_DEVICE_COPY_H_
