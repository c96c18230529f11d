#include "pool/devices/pool_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

TEST(PoolSpec, ParsesCountsModelsAndNodes) {
  absl::StatusOr<SimulatedPoolSpec> spec = ParseSimulationSpec("4xH100-80GB,2xl4", 3);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->nodes.size(), 3u);
  EXPECT_EQ(spec->nodes[2].name, "node-2");
  ASSERT_EQ(spec->nodes[0].gpus.size(), 6u);
  EXPECT_EQ(spec->nodes[0].gpus[0].model->name, "H100-80GB");
  EXPECT_EQ(spec->nodes[0].gpus[5].model->name, "L4");
  // NVLink-capable GPUs of one model share an island; L4s have none.
  EXPECT_EQ(spec->nodes[0].gpus[3].nvlink_island, "nvl0");
  EXPECT_EQ(spec->nodes[0].gpus[4].nvlink_island, "");
  EXPECT_EQ(DescribePool(*spec), "3 nodes x (4 H100-80GB + 2 L4)");
}

TEST(PoolSpec, MalformedSpecsNameTheProblem) {
  struct Case { const char* spec; const char* why; };
  for (const Case& c : {Case{"", "it is empty"},
                        Case{"4xH100-80GB,", "empty item"},
                        Case{"H100-80GB", "no COUNTx prefix"},
                        Case{"fourxH100-80GB", "not a number"},
                        Case{"0xH100-80GB", "count below 1"},
                        Case{"-2xL4", "count below 1"},
                        Case{"4xH100", "unknown GPU model 'H100'"},
                        Case{"65xL4", "at most 64 GPUs"}}) {
    absl::StatusOr<SimulatedPoolSpec> spec = ParseSimulationSpec(c.spec);
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(c.why)) << c.spec;
  }
  EXPECT_FALSE(ParseSimulationSpec("1xL4", 0).ok());
}

}  // namespace
}  // namespace gpupool::pool
