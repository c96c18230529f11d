#include "runtime/agent/cuda_diagnostic.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/gpu/device_memory_test.h"
#include "runtime/gpu/known_answer_matmul.h"

namespace gpupool::runtime {

absl::Status CudaDiagnostic::Run(int gpu_index, const std::atomic<bool>& stop) {
  absl::StatusOr<gpu::MatmulTestResult> matmul = gpu::RunKnownAnswerMatmul(gpu_index, matmul_n_);
  if (!matmul.ok()) return matmul.status();
  if (matmul->mismatches > 0) {
    return absl::DataLossError(absl::StrCat("known-answer matmul (n=", matmul_n_, "): ", matmul->mismatches, " of ",
                                            matmul->elements, " checked elements wrong"));
  }
  if (stop.load()) return absl::CancelledError("interrupted after the known-answer matmul");
  absl::StatusOr<size_t> free_bytes = gpu::FreeDeviceMemory(gpu_index);
  if (!free_bytes.ok()) return free_bytes.status();
  const size_t bytes = static_cast<size_t>(static_cast<double>(*free_bytes) * memory_fraction_);
  absl::StatusOr<gpu::PatternTestResult> memory = gpu::RunDeviceMemoryPatternTest(gpu_index, bytes);
  if (!memory.ok()) return memory.status();
  if (memory->words_corrupted > 0) {
    return absl::DataLossError(absl::StrCat("memory pattern test: ", memory->words_corrupted, " of ",
                                            memory->words_tested, " words altered"));
  }
  return absl::OkStatus();
}

}  // namespace gpupool::runtime
