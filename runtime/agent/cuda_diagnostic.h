// File: runtime/agent/cuda_diagnostic.h
//
// The diagnostic on real GPUs (DCGM's r1 class, seconds long): a known-answer matrix product
// (runtime/gpu/known_answer_matmul.h) and the memory pattern test (runtime/gpu/device_memory_test.h)
// over most of the GPU's free memory. Run on the GPU of the given index, taken as the CUDA device
// of that index: the agent must run with CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA's order is
// NVML's. Never run on the build machine (it has no GPU); without one every Run is Unavailable.
#ifndef GPUPOOL_RUNTIME_AGENT_CUDA_DIAGNOSTIC_H_
#define GPUPOOL_RUNTIME_AGENT_CUDA_DIAGNOSTIC_H_

#include "runtime/agent/diagnostics.h"

namespace gpupool::runtime {

class CudaDiagnostic final : public GpuDiagnostic {
 public:
  // `memory_fraction` of the free memory goes to the pattern test; `matmul_n` is the product's size.
  explicit CudaDiagnostic(double memory_fraction = 0.8, int matmul_n = 2048)
      : memory_fraction_(memory_fraction), matmul_n_(matmul_n) {}
  // `stop` is looked at between the matrix product and the memory test.
  absl::Status Run(int gpu_index, const std::atomic<bool>& stop) override;

 private:
  const double memory_fraction_;
  const int matmul_n_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_CUDA_DIAGNOSTIC_H_
