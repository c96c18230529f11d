// File: runtime/gpu/device_memory_test.h
//
// CUDA kernels the runtime runs on real GPUs, behind plain C++ functions so callers need no CUDA
// headers:
//   - ScrubDeviceMemory zeroes device memory before it passes from one team's lease to another's
//     (DESIGN §6: GPU memory handed between tenants is scrubbed first).
//   - RunDeviceMemoryPatternTest writes an address-derived pattern over a buffer and reads it back
//     on the GPU, counting words that changed: the active test that finds silent corruption no
//     ECC counter shows (the real-GPU counterpart of SimulatedDriver::RunMemoryTest).
// Both return Unavailable, with the CUDA error's name, where no usable GPU is present; they never
// abort the process.
#ifndef GPUPOOL_RUNTIME_GPU_DEVICE_MEMORY_TEST_H_
#define GPUPOOL_RUNTIME_GPU_DEVICE_MEMORY_TEST_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpupool::gpu {

// Number of CUDA devices usable now; Unavailable (with the reason) when there are none.
absl::StatusOr<int> CudaDeviceCount();

// Zeroes `bytes` at `device_ptr` on the current device and waits for it.
absl::Status ScrubDeviceMemory(void* device_ptr, size_t bytes);

struct PatternTestResult {
  uint64_t words_tested = 0;
  uint64_t words_corrupted = 0;
};
// Allocates `bytes` on `device`, runs the pattern test, frees the buffer.
absl::StatusOr<PatternTestResult> RunDeviceMemoryPatternTest(int device, size_t bytes);

}  // namespace gpupool::gpu

#endif  // GPUPOOL_RUNTIME_GPU_DEVICE_MEMORY_TEST_H_
