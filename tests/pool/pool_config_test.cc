#include "pool/devices/pool_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

TEST(PoolConfig, ReadsNodesGpusMigAndPrices) {
  absl::StatusOr<PoolConfig> config = ParsePoolConfig(R"(
prices:
  H100-80GB: 3.2
nodes:
  - name: dgx
    count: 2
    labels: {rack: r1}
    gpus:
      - {model: H100-80GB, count: 8}
  - name: infer
    gpus:
      - model: a100-80gb
        count: 2
        mig: [3g.40gb, 2g.20gb, 2g.20gb]
        labels: {tier: inference}
      - model: L4
)", "test.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->simulated_nodes.has_value());
  const auto& nodes = config->simulated_nodes->nodes;
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].name, "dgx-0");
  EXPECT_EQ(nodes[1].name, "dgx-1");
  EXPECT_EQ(nodes[1].labels.at("rack"), "r1");
  EXPECT_EQ(nodes[2].gpus.size(), 3u);
  EXPECT_TRUE(nodes[2].gpus[0].mig_enabled);
  EXPECT_EQ(nodes[2].gpus[1].mig_profiles.size(), 3u);
  EXPECT_EQ(nodes[2].gpus[0].labels.at("tier"), "inference");
  EXPECT_EQ(config->PricePerHour(*FindGpuModel("H100-80GB")), 3.2);
  EXPECT_EQ(config->PricePerHour(*FindGpuModel("L4")), FindGpuModel("L4")->default_price_per_hour);
}

TEST(PoolConfig, EachInvalidFieldIsNamedWithItsPosition) {
  struct Case { const char* yaml; const char* why; };
  for (const Case& c : {
           Case{"nodes:\n  - gpus:\n      - {model: H100, count: 2}\n",
                "test.yaml:3:17: nodes[0].gpus[0].model: unknown GPU model 'H100'"},
           Case{"nodes:\n  - gpus:\n      - {model: L4, count: -1}\n",
                "nodes[0].gpus[0].count: -1 is outside 1..64"},
           Case{"nodes:\n  - gpus:\n      - {model: L4, mig: [1g.10gb]}\n",
                "nodes[0].gpus[0].mig: L4 does not support MIG"},
           Case{"nodes:\n  - gpus:\n      - {model: H100-80GB, mig: [4g.40gb, 4g.40gb]}\n",
                "nodes[0].gpus[0].mig: at most 1 4g.40gb instance"},
           Case{"nodes:\n  - gpus:\n      - {model: L4, colour: red}\n",
                "nodes[0].gpus[0]: unknown key 'colour'"},
           Case{"nodes:\n  - name: a\n    gpus: []\n  - name: a\n    gpus: []\n",
                "node name 'a' is used twice"},
           Case{"nodes:\n  - name: a\n", "nodes[0].gpus: needs a list"},
           Case{"prices:\n  L4: cheap\n", "prices.L4: must be a number"},
           Case{"prices:\n  L4: -1\n", "a price cannot be negative"},
           Case{"teams: []\n", "top level: unknown key 'teams'"},
           Case{"nodes: [\n", "invalid YAML"},
       }) {
    absl::StatusOr<PoolConfig> config = ParsePoolConfig(c.yaml, "test.yaml");
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.why)) << c.yaml;
  }
}

TEST(PoolConfig, TheShippedExampleLoads) {
  const char* root = std::getenv("GPUPOOL_SOURCE_DIR");
  ASSERT_NE(root, nullptr);
  absl::StatusOr<PoolConfig> config = LoadPoolConfig(std::string(root) + "/examples/pool.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->simulated_nodes.has_value());
}

TEST(PoolConfig, MissingFileIsNotFound) {
  EXPECT_EQ(LoadPoolConfig("/nonexistent/pool.yaml").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool::pool
