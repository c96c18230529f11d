// NvidiaDriver::ReadTelemetry over a stand-in NVML library (fake_nvml.c): NVML's units become the
// telemetry's, what a GPU cannot report stays unknown, a lost GPU says so, and the last XID comes
// from the event set without taking the XIDs from ReadHealth.
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pool/devices/nvidia_driver.h"

namespace gpupool::pool {
namespace {

std::unique_ptr<NvidiaDriver> OpenFake() {
  NvidiaDriverOptions options;
  options.nvml_library = FAKE_NVML_PATH;
  options.cuda_library = "/nonexistent/libcuda.so.1";  // SM counts are not this test's business
  options.node_name = "n";
  absl::StatusOr<std::unique_ptr<NvidiaDriver>> driver = NvidiaDriver::Open(options);
  EXPECT_TRUE(driver.ok()) << driver.status();
  return driver.ok() ? *std::move(driver) : nullptr;
}

TEST(NvidiaTelemetry, NvmlUnitsBecomeMiBWattsAndPercent) {
  std::unique_ptr<NvidiaDriver> driver = OpenFake();
  ASSERT_NE(driver, nullptr);
  absl::StatusOr<GpuTelemetry> t = driver->ReadTelemetry({"n", 0});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->reachable);
  EXPECT_EQ(t->utilization_percent, 42);
  EXPECT_EQ(t->fb_used_mib, 1024);
  EXPECT_EQ(t->fb_free_mib, 79 * 1024);
  EXPECT_EQ(t->temperature_c, 55);
  EXPECT_DOUBLE_EQ(t->power_watts, 123.456);
  EXPECT_EQ(t->last_xid, 0);
}

TEST(NvidiaTelemetry, UnsupportedFiguresStayUnknownAndTheLastXidLeavesHealthItsEvents) {
  std::unique_ptr<NvidiaDriver> driver = OpenFake();
  ASSERT_NE(driver, nullptr);
  absl::StatusOr<GpuTelemetry> t = driver->ReadTelemetry({"n", 1});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->utilization_percent, -1);
  EXPECT_EQ(t->power_watts, -1);
  EXPECT_EQ(t->temperature_c, 35);
  EXPECT_EQ(t->last_xid, 13) << "the newer of the two XIDs";
  absl::StatusOr<GpuHealthReading> health = driver->ReadHealth({"n", 1});
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_THAT(health->xids, ::testing::ElementsAre(48, 13)) << "a scrape must not take the health checks' XIDs";
  EXPECT_EQ(driver->ReadTelemetry({"n", 1})->last_xid, 13) << "a gauge: reading health does not clear it";
}

TEST(NvidiaTelemetry, ALostGpuIsUnreachableAndAnUnknownOneNotFound) {
  std::unique_ptr<NvidiaDriver> driver = OpenFake();
  ASSERT_NE(driver, nullptr);
  absl::StatusOr<GpuTelemetry> t = driver->ReadTelemetry({"n", 2});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->reachable);
  EXPECT_EQ(t->fb_used_mib, -1);
  EXPECT_EQ(t->temperature_c, -1);
  EXPECT_TRUE(absl::IsNotFound(driver->ReadTelemetry({"n", 3}).status()));
  EXPECT_TRUE(absl::IsNotFound(driver->ReadTelemetry({"other-node", 0}).status()));
}

}  // namespace
}  // namespace gpupool::pool
