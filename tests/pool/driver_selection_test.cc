#include "pool/devices/driver_selection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "pool/devices/nvidia_driver.h"

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

// These run on machines without an NVIDIA driver (CI); where one is present they skip.
bool NvidiaPresent() { return NvidiaDriver::Open().ok(); }

TEST(DriverSelection, NothingNamedFallsBackToTheDefaultSimulatedPoolAndSaysSo) {
  if (NvidiaPresent()) GTEST_SKIP() << "an NVIDIA driver is present on this machine";
  absl::StatusOr<SelectedDriver> s = SelectDriver({});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->driver->name(), "simulated");
  EXPECT_THAT(s->notice, HasSubstr("using a simulated pool of 1 node x 8 H100-80GB"));
  EXPECT_EQ(s->notice.find('\n'), std::string::npos);  // one line
  std::vector<DiscoveredNode> nodes = s->driver->Discover().value();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].gpus.size(), 8u);
}

TEST(DriverSelection, NamedNvidiaWithoutTheDriverIsAnError) {
  if (NvidiaPresent()) GTEST_SKIP() << "an NVIDIA driver is present on this machine";
  absl::StatusOr<SelectedDriver> s = SelectDriver({.driver = "nvidia"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("libnvidia-ml.so.1"));
}

TEST(DriverSelection, SpecImpliesSimulatedWithoutNotice) {
  absl::StatusOr<SelectedDriver> s = SelectDriver({.simulation_spec = "2xL4", .node_count = 3});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->driver->name(), "simulated");
  EXPECT_TRUE(s->notice.empty());
  EXPECT_EQ(s->driver->Discover().value().size(), 3u);
}

TEST(DriverSelection, ConflictingChoicesAreRefused) {
  EXPECT_THAT(std::string(SelectDriver({.driver = "amd"}).status().message()),
              HasSubstr("unknown driver 'amd'"));
  EXPECT_EQ(SelectDriver({.driver = "nvidia", .simulation_spec = "1xL4"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  PoolConfig config = ParsePoolConfig("nodes:\n  - gpus: [{model: L4}]\n", "t").value();
  EXPECT_THAT(std::string(SelectDriver({.simulation_spec = "1xL4", .config = &config}).status().message()),
              HasSubstr("give one"));
  absl::StatusOr<SelectedDriver> from_config = SelectDriver({.config = &config});
  ASSERT_TRUE(from_config.ok());
  EXPECT_EQ(from_config->driver->Discover().value()[0].gpus[0].model, "L4");
}

}  // namespace
}  // namespace gpupool::pool
