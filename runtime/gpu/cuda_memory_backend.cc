// The real-GPU side of the memory pool: stream-ordered allocation (cudaMallocAsync) on a stream
// the pool owns, so allocation and scrubbing never wait for other tasks' kernels. Not exercised on
// the machines that build this project (no GPU); it runs whenever the NVIDIA driver is present.
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "runtime/gpu/current_device_guard.h"
#include "runtime/gpu/memory_pool.h"

namespace gpupool::runtime {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

class CudaMemoryBackend final : public MemoryBackend {
 public:
  CudaMemoryBackend(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~CudaMemoryBackend() override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  absl::StatusOr<void*> Allocate(uint64_t bytes) override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, bytes, stream_);
    if (e != cudaSuccess) return CudaError(e, "cudaMallocAsync");
    e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamSynchronize");
    return p;
  }
  void Free(void* ptr, uint64_t) override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    cudaFreeAsync(ptr, stream_);
  }
  absl::Status Zero(void* ptr, uint64_t bytes) override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    return e == cudaSuccess ? absl::OkStatus() : CudaError(e, "scrubbing device memory");
  }
  int cuda_device() const override { return device_; }
  void* stream() const override { return stream_; }
  absl::StatusOr<void*> CreateStream() override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    cudaStream_t s = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreateWithFlags");
    return static_cast<void*>(s);
  }
  void DestroyStream(void* stream) override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  absl::Status Synchronize(void* stream) override {
    CurrentDeviceGuard keep;
    cudaSetDevice(device_);
    cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? absl::OkStatus() : CudaError(e, "cudaStreamSynchronize");
  }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryBackend>> MakeCudaMemoryBackend(int cuda_device) {
  cudaError_t e = cudaSetDevice(cuda_device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  cudaStream_t stream = nullptr;
  e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return CudaError(e, "cudaStreamCreateWithFlags");
  return std::unique_ptr<MemoryBackend>(new CudaMemoryBackend(cuda_device, stream));
}

int CudaDeviceForPciBusId(const std::string& pci_bus_id) {
  int device = -1;
  if (cudaDeviceGetByPCIBusId(&device, pci_bus_id.c_str()) != cudaSuccess) return -1;
  return device;
}

}  // namespace gpupool::runtime
