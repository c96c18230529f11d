#include "pool/inventory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

Inventory FromConfig(const char* yaml) {
  PoolConfig config = ParsePoolConfig(yaml, "test.yaml").value();
  auto driver = SimulatedDriver::Create(*config.simulated_nodes).value();
  return Inventory::FromDiscovery(driver->Discover().value()).value();
}

TEST(Inventory, LabelsIslandsAndSelection) {
  Inventory inv = FromConfig(R"(
nodes:
  - name: a
    labels: {rack: r1}
    gpus:
      - {model: H100-80GB, count: 4}
      - {model: L4, count: 2, labels: {tier: inference}}
  - name: b
    labels: {rack: r2}
    gpus:
      - {model: H100-80GB, count: 4, nvlink_island: left}
)");
  EXPECT_EQ(inv.gpu_count(), 10);
  const InventoryGpu* a0 = inv.Find({"a", 0});
  ASSERT_NE(a0, nullptr);
  EXPECT_EQ(a0->labels.at("model"), "H100-80GB");
  EXPECT_EQ(a0->labels.at("memory"), "80GB");
  EXPECT_EQ(a0->labels.at("rack"), "r1");
  EXPECT_EQ(a0->labels.at("nvlink-island"), "a/nvl0");
  EXPECT_TRUE(inv.SameNvLinkIsland({"a", 0}, {"a", 3}));
  EXPECT_FALSE(inv.SameNvLinkIsland({"a", 0}, {"a", 4}));   // L4 has no NVLink
  EXPECT_FALSE(inv.SameNvLinkIsland({"a", 4}, {"a", 5}));
  EXPECT_FALSE(inv.SameNvLinkIsland({"a", 0}, {"b", 0}));   // islands never span nodes
  EXPECT_EQ(inv.Find({"b", 2})->nvlink_island, "b/left");
  EXPECT_EQ(inv.Select({{"model", "L4"}, {"tier", "inference"}}).size(), 2u);
  EXPECT_EQ(inv.Select({{"rack", "r2"}}).size(), 4u);
  // Find: every GPU by its own reference (also after the inventory is copied), none else.
  const Inventory copy = inv;
  for (const InventoryGpu& gpu : inv.gpus()) {
    EXPECT_EQ(inv.Find(gpu.ref), &gpu);
    ASSERT_NE(copy.Find(gpu.ref), nullptr);
    EXPECT_EQ(copy.Find(gpu.ref)->ref, gpu.ref);
    EXPECT_NE(copy.Find(gpu.ref), &gpu);
  }
  EXPECT_EQ(inv.Find({"a", 6}), nullptr);   // a node's GPU it does not have
  EXPECT_EQ(inv.Find({"b", 4}), nullptr);
  EXPECT_EQ(inv.Find({"c", 0}), nullptr);   // a node the pool does not have
  EXPECT_EQ(inv.Find({"", 0}), nullptr);
}

TEST(Inventory, RebuildsMigLayoutsAndRejectsImpossibleOnes) {
  Inventory inv = FromConfig(R"(
nodes:
  - gpus:
      - {model: A100-40GB, mig: [3g.20gb, 2g.10gb, 1g.5gb]}
)");
  const InventoryGpu* gpu = inv.Find({"node-0", 0});
  ASSERT_TRUE(gpu->mig_layout.has_value());
  EXPECT_EQ(gpu->mig_layout->FreeMemorySlices(), 1);

  DiscoveredNode node{"n", {}, {}};
  DiscoveredGpu g;
  g.model = "H100-80GB";
  g.mig_mode = MigMode::kEnabled;
  g.instances = {{1, "4g.40gb", 0, 4, "", {}}, {2, "3g.40gb", 0, 4, "", {}}};
  node.gpus.push_back(g);
  absl::StatusOr<Inventory> bad = Inventory::FromDiscovery({node});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("node n GPU 0"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("4g.40gb@0 holds slice 0"));
}

TEST(Inventory, HealthVerdictsAreRecordedAndGateScheduling) {
  Inventory inv = FromConfig("nodes:\n  - gpus: [{model: T4, count: 2}]\n");
  EXPECT_TRUE(inv.Find({"node-0", 1})->schedulable());
  ASSERT_TRUE(inv.SetHealth({"node-0", 1}, {HealthState::kDraining, {"XID 48"}}).ok());
  EXPECT_FALSE(inv.Find({"node-0", 1})->schedulable());
  EXPECT_EQ(inv.SetHealth({"node-0", 7}, {}).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool::pool
