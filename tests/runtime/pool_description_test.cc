#include "gpupool/pool_description.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpupool/error.h"

namespace gpupool {
namespace {

using ::testing::HasSubstr;

TEST(DescribePool, SimulatedPoolWithHealthAndPrices) {
  PoolDescription pool = DescribePool({.simulate = "2xH100-80GB,1xL4", .node_count = 2});
  EXPECT_EQ(pool.driver, "simulated");
  ASSERT_EQ(pool.nodes.size(), 2u);
  const GpuInfo& g = pool.nodes[1].gpus[0];
  EXPECT_EQ(g.model, "H100-80GB");
  EXPECT_EQ(g.mig_mode, MigMode::kDisabled);
  EXPECT_EQ(g.health, HealthState::kHealthy);
  EXPECT_EQ(g.nvlink_island, "node-1/nvl0");
  EXPECT_EQ(g.temperature_c, 40);
  EXPECT_GT(g.price_per_hour, 0);
  EXPECT_EQ(pool.nodes[1].gpus[2].nvlink_island, "node-1/gpu2");
}

TEST(DescribePool, ConfigFileWithMig) {
  const char* root = std::getenv("GPUPOOL_SOURCE_DIR");
  ASSERT_NE(root, nullptr);
  PoolDescription pool = DescribePool({.config_path = std::string(root) + "/examples/pool.yaml"});
  ASSERT_EQ(pool.nodes.size(), 3u);
  const GpuInfo& a100 = pool.nodes[2].gpus[0];
  EXPECT_EQ(a100.mig_mode, MigMode::kEnabled);
  EXPECT_EQ(a100.instances.size(), 4u);
  EXPECT_EQ(pool.nodes[0].gpus[0].price_per_hour, 3.20);  // configured, not the default
}

TEST(DescribePool, EnumNamesParseBack) {
  for (MigMode mode : {MigMode::kUnsupported, MigMode::kDisabled, MigMode::kEnabled}) {
    EXPECT_EQ(ParseMigMode(MigModeName(mode)), mode);
  }
  for (HealthState state : {HealthState::kHealthy, HealthState::kDegraded, HealthState::kDraining,
                            HealthState::kQuarantined, HealthState::kFailed, HealthState::kLost}) {
    EXPECT_EQ(ParseHealthState(HealthStateName(state)), state);
  }
  EXPECT_EQ(MigModeName(MigMode::kEnabled), "enabled");
  EXPECT_EQ(HealthStateName(HealthState::kDraining), "draining");
  EXPECT_EQ(HealthStateName(HealthState::kQuarantined), "quarantined");
  EXPECT_EQ(HealthStateName(HealthState::kFailed), "failed");
  EXPECT_EQ(ParseMigMode("on"), std::nullopt);
  EXPECT_EQ(ParseHealthState(""), std::nullopt);
}

TEST(DescribePool, BadInputThrowsErrorWithCodeAndMessage) {
  try {
    DescribePool({.simulate = "4xH999"});
    FAIL() << "expected gpupool::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("unknown GPU model 'H999'"));
  }
  EXPECT_THROW(DescribePool({.config_path = "/nonexistent.yaml"}), Error);
}

}  // namespace
}  // namespace gpupool
