#include "runtime/gpu/device_memory_test.h"

#include <gtest/gtest.h>

namespace gpupool::gpu {
namespace {

// On a machine with a GPU the pattern test runs for real and must find no corruption; without
// one it must say why instead of crashing.
TEST(DeviceMemoryTest, RunsOnAGpuOrExplainsItsAbsence) {
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok()) {
    EXPECT_EQ(devices.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(devices.status().message().empty());
    absl::StatusOr<PatternTestResult> r = RunDeviceMemoryPatternTest(0, 1 << 20);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    GTEST_SKIP() << "no CUDA device: " << devices.status().message();
  }
  absl::StatusOr<PatternTestResult> r = RunDeviceMemoryPatternTest(0, 256 << 20);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->words_tested, (256u << 20) / 8);
  EXPECT_EQ(r->words_corrupted, 0u);
  EXPECT_EQ(RunDeviceMemoryPatternTest(*devices, 1024).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::gpu
