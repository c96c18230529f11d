// File: runtime/gpu/known_answer_matmul.h
//
// A known-answer test of a GPU's arithmetic (the compute half of DCGM's r1-class diagnostic): a
// matrix product of fixed-seed matrices of small integers, computed on the GPU in float and
// checked element by element against the product computed on the host in exact integer
// arithmetic, on one row of every tile row (so every block of the kernel has a row checked; see
// the .cu for why not all of them). Small integers keep every partial sum exact in float (|sum| <= n * 16 < 2^24 for
// n <= 4096), so any difference is the GPU's fault, not rounding. Also reports the FLOP rate it
// saw (of a plain tiled kernel: a floor, not the device's peak).
//
//   absl::StatusOr<MatmulTestResult> r = RunKnownAnswerMatmul(/*device=*/0, /*n=*/1024);
//   if (r.ok() && r->mismatches > 0) ... the GPU computes wrong answers
//
// Unavailable (with the CUDA error's name) where no usable GPU is present. Never run here (no
// GPU on the build machine): tests/runtime covers only the no-GPU answer.
#ifndef GPUPOOL_RUNTIME_GPU_KNOWN_ANSWER_MATMUL_H_
#define GPUPOOL_RUNTIME_GPU_KNOWN_ANSWER_MATMUL_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace gpupool::gpu {

struct MatmulTestResult {
  uint64_t elements = 0;  // checked
  uint64_t mismatches = 0;
  double kernel_seconds = 0;
  double gflops = 0;  // 2 n^3 / kernel_seconds / 1e9
};

// n in [16, 4096] (InvalidArgument otherwise).
absl::StatusOr<MatmulTestResult> RunKnownAnswerMatmul(int device, int n);

// Free device memory on `device` now, in bytes (cudaMemGetInfo).
absl::StatusOr<size_t> FreeDeviceMemory(int device);

}  // namespace gpupool::gpu

#endif  // GPUPOOL_RUNTIME_GPU_KNOWN_ANSWER_MATMUL_H_
