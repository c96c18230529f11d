#include "runtime/gpu/device_memory_test.h"

#include <cuda_runtime.h>

#include <string>

namespace gpupool::gpu {
namespace {

absl::Status CudaError(const char* call, cudaError_t err) {
  (void)cudaGetLastError();  // clear a sticky error so later calls start clean
  std::string message = std::string(call) + ": " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
      err == cudaErrorInvalidDevice) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

// The pattern is a mix of the word's index, so a stuck bit, an address-line fault and a
// shifted copy each produce words that do not match.
__device__ __forceinline__ uint64_t PatternFor(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29) ^ 0xA5A5A5A5A5A5A5A5ull;
}

__global__ void WritePattern(uint64_t* words, uint64_t n) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    words[i] = PatternFor(i);
  }
}

__global__ void CountMismatches(const uint64_t* words, uint64_t n, unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    local += words[i] != PatternFor(i);
  }
  if (local != 0) atomicAdd(mismatches, local);
}

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return CudaError("cudaGetDeviceCount", err);
  if (count == 0) return absl::UnavailableError("cudaGetDeviceCount: no CUDA devices");
  return count;
}

absl::Status ScrubDeviceMemory(void* device_ptr, size_t bytes) {
  if (cudaError_t err = cudaMemset(device_ptr, 0, bytes); err != cudaSuccess) {
    return CudaError("cudaMemset", err);
  }
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    return CudaError("cudaDeviceSynchronize", err);
  }
  return absl::OkStatus();
}

absl::StatusOr<PatternTestResult> RunDeviceMemoryPatternTest(int device, size_t bytes) {
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok()) return devices.status();
  if (device < 0 || device >= *devices) {
    return absl::InvalidArgumentError("device " + std::to_string(device) + " does not exist (" +
                                      std::to_string(*devices) + " present)");
  }
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
    return CudaError("cudaSetDevice", err);
  }
  const uint64_t n = bytes / sizeof(uint64_t);
  uint64_t* words = nullptr;
  unsigned long long* mismatches = nullptr;
  if (cudaError_t err = cudaMalloc(&words, n * sizeof(uint64_t)); err != cudaSuccess) {
    return CudaError("cudaMalloc", err);
  }
  if (cudaError_t err = cudaMalloc(&mismatches, sizeof(*mismatches)); err != cudaSuccess) {
    cudaFree(words);
    return CudaError("cudaMalloc", err);
  }
  PatternTestResult result;
  result.words_tested = n;
  cudaError_t err = cudaMemset(mismatches, 0, sizeof(*mismatches));
  if (err == cudaSuccess) {
    WritePattern<<<1024, 256>>>(words, n);
    CountMismatches<<<1024, 256>>>(words, n, mismatches);
    err = cudaGetLastError();
  }
  unsigned long long host_mismatches = 0;
  if (err == cudaSuccess) {
    err = cudaMemcpy(&host_mismatches, mismatches, sizeof(host_mismatches), cudaMemcpyDeviceToHost);
  }
  cudaFree(words);
  cudaFree(mismatches);
  if (err != cudaSuccess) return CudaError("pattern test", err);
  result.words_corrupted = host_mismatches;
  return result;
}

}  // namespace gpupool::gpu
