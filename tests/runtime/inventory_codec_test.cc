#include "runtime/rpc/inventory_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::rpc {
namespace {

TEST(InventoryCodec, RoundTripsEveryField) {
  const char* root = std::getenv("GPUPOOL_SOURCE_DIR");
  PoolDescription pool = DescribePool({.config_path = std::string(root) + "/examples/pool.yaml"});
  pool.nodes[0].gpus[1].health = "draining";
  pool.nodes[0].gpus[1].health_reasons = {"XID 48"};
  std::string bytes = EncodeInventory(pool);
  absl::StatusOr<PoolDescription> back = DecodeInventory(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->nodes.size(), pool.nodes.size());
  EXPECT_EQ(back->driver, "simulated");
  for (size_t n = 0; n < pool.nodes.size(); ++n) {
    EXPECT_EQ(back->nodes[n].name, pool.nodes[n].name);
    EXPECT_EQ(back->nodes[n].labels, pool.nodes[n].labels);
    ASSERT_EQ(back->nodes[n].gpus.size(), pool.nodes[n].gpus.size());
    for (size_t g = 0; g < pool.nodes[n].gpus.size(); ++g) {
      const GpuInfo& a = pool.nodes[n].gpus[g];
      const GpuInfo& b = back->nodes[n].gpus[g];
      EXPECT_EQ(a.uuid, b.uuid);
      EXPECT_EQ(a.model, b.model);
      EXPECT_EQ(a.memory_mib, b.memory_mib);
      EXPECT_EQ(a.mig_mode, b.mig_mode);
      EXPECT_EQ(a.health, b.health);
      EXPECT_EQ(a.health_reasons, b.health_reasons);
      EXPECT_EQ(a.labels, b.labels);
      EXPECT_EQ(a.price_per_hour, b.price_per_hour);
      ASSERT_EQ(a.instances.size(), b.instances.size());
      for (size_t i = 0; i < a.instances.size(); ++i) {
        EXPECT_EQ(a.instances[i].profile, b.instances[i].profile);
        EXPECT_EQ(a.instances[i].start, b.instances[i].start);
        EXPECT_EQ(a.instances[i].compute_instances.size(), b.instances[i].compute_instances.size());
      }
    }
  }
}

TEST(InventoryCodec, GarbageIsRefusedNotCrashed) {
  EXPECT_EQ(DecodeInventory("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeInventory("not eight").status().code(), absl::StatusCode::kInvalidArgument);
  // A segment table claiming far more data than present.
  std::string bogus("\x00\x00\x00\x00\xff\xff\xff\x0f", 8);
  bogus += std::string(8, 'x');
  absl::StatusOr<PoolDescription> r = DecodeInventory(bogus);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("malformed inventory"));
  // Truncating a real message anywhere never crashes.
  std::string real = EncodeInventory(DescribePool({.simulate = "2xA100-40GB"}));
  for (size_t cut = 8; cut < real.size(); cut += 8) {
    (void)DecodeInventory(real.substr(0, cut));
  }
}

}  // namespace
}  // namespace gpupool::rpc
