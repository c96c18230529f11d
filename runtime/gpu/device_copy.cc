// Not exercised on the machines that build this project (no GPU): the CUDA branch runs whenever
// a task on a real GPU checkpoints device memory.
#include "runtime/gpu/device_copy.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/gpu/current_device_guard.h"

namespace gpupool::runtime {
namespace {

absl::Status Copy(void* dst, const void* src, uint64_t bytes, int cuda_device, cudaMemcpyKind kind, void* stream) {
  if (cuda_device < 0) {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  CurrentDeviceGuard keep;  // the task's current device stays its own
  cudaError_t e = cudaSetDevice(cuda_device);
  if (stream == nullptr) {
    if (e == cudaSuccess) e = cudaMemcpy(dst, src, bytes, kind);
  } else {
    auto s = static_cast<cudaStream_t>(stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, kind, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  }
  if (e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("copying ", bytes, " bytes ",
                                               kind == cudaMemcpyDeviceToHost ? "from" : "to",
                                               " CUDA device ", cuda_device, ": ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace

void MakeDeviceCurrent(int cuda_device) {
  if (cuda_device >= 0) cudaSetDevice(cuda_device);
}

absl::Status CopyDeviceToHost(void* host, const void* device, uint64_t bytes, int cuda_device, void* stream) {
  return Copy(host, device, bytes, cuda_device, cudaMemcpyDeviceToHost, stream);
}

absl::Status CopyHostToDevice(void* device, const void* host, uint64_t bytes, int cuda_device, void* stream) {
  return Copy(device, host, bytes, cuda_device, cudaMemcpyHostToDevice, stream);
}

PinnedHostBuffer::PinnedHostBuffer(uint64_t bytes) : size_(bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess) {
    pinned_ = true;
  } else {
    cudaGetLastError();  // clear it: pinning is an optimisation
    p = std::malloc(bytes);
  }
  data_ = static_cast<std::byte*>(p);
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_ == nullptr) return;
  if (pinned_) {
    cudaFreeHost(data_);
  } else {
    std::free(data_);
  }
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), pinned_(o.pinned_) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    PinnedHostBuffer dying(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    pinned_ = o.pinned_;
  }
  return *this;
}

}  // namespace gpupool::runtime
