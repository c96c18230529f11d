#include "pool/devices/simulated_driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pool/config/pool_config.h"

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<SimulatedDriver> Make(const char* spec, int nodes = 1) {
  return SimulatedDriver::Create(ParseSimulationSpec(spec, nodes).value()).value();
}

std::unique_ptr<SimulatedDriver> MakeMig(const char* yaml) {
  return SimulatedDriver::Create(*ParsePoolConfig(yaml, "t.yaml").value().simulated_nodes).value();
}

TEST(SimulatedDriver, DiscoversWhatTheSpecDescribes) {
  auto driver = Make("2xH100-80GB,1xT4", 2);
  std::vector<DiscoveredNode> nodes = driver->Discover().value();
  ASSERT_EQ(nodes.size(), 2u);
  ASSERT_EQ(nodes[1].gpus.size(), 3u);
  const DiscoveredGpu& h = nodes[1].gpus[0];
  EXPECT_EQ(h.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h.model, "H100-80GB");
  EXPECT_EQ(h.memory_mib, 81559u);
  EXPECT_EQ(h.mig_mode, MigMode::kDisabled);
  EXPECT_EQ(nodes[1].gpus[2].mig_mode, MigMode::kUnsupported);
  EXPECT_THAT(h.uuid, ::testing::StartsWith("GPU-"));
  EXPECT_NE(h.uuid, nodes[0].gpus[0].uuid);
  EXPECT_EQ(h.uuid, Make("2xH100-80GB,1xT4", 2)->Discover().value()[1].gpus[0].uuid);  // stable
  ASSERT_EQ(h.nvlink_peers.size(), 1u);
  EXPECT_EQ(h.nvlink_peers[0].peer_pci_bus_id, nodes[1].gpus[1].pci_bus_id);
  EXPECT_TRUE(nodes[1].gpus[2].nvlink_peers.empty());
  GpuHealthReading r = driver->ReadHealth({"node-0", 0}).value();
  EXPECT_TRUE(r.reachable);
  EXPECT_EQ(r.ecc_uncorrectable, 0);
  EXPECT_EQ(AssessHealth(r).state, HealthState::kHealthy);
}

// MIG emulation refuses exactly what MigLayout (the hardware's rules) refuses.
TEST(SimulatedDriver, MigInstancesFollowHardwareRules) {
  auto driver = MakeMig("nodes:\n  - name: n\n    gpus: [{model: H100-80GB, mig: [3g.40gb]}]\n");
  GpuRef gpu{"n", 0};
  std::vector<DiscoveredNode> nodes = driver->Discover().value();
  ASSERT_EQ(nodes[0].gpus[0].instances.size(), 1u);
  EXPECT_EQ(nodes[0].gpus[0].instances[0].start, 4);
  EXPECT_EQ(nodes[0].gpus[0].instances[0].compute_instances.size(), 1u);
  // A GPU instance is addressed by its first compute instance's MIG device UUID, as NVML does.
  EXPECT_EQ(nodes[0].gpus[0].instances[0].uuid,
            nodes[0].gpus[0].instances[0].compute_instances[0].uuid);

  absl::StatusOr<GpuInstanceInfo> bad = driver->CreateGpuInstance(gpu, "2g.20gb", 4);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("3g.40gb@4 holds slice 4"));
  EXPECT_EQ(driver->CreateGpuInstance(gpu, "2g.20gb", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<GpuInstanceInfo> gi = driver->CreateGpuInstance(gpu, "2g.20gb", std::nullopt);
  ASSERT_TRUE(gi.ok()) << gi.status();
  EXPECT_EQ(gi->start, 0);  // keeps 2g.20gb placeable at 2
  EXPECT_EQ(gi->id, 2);
  EXPECT_EQ(gi->uuid, "");  // no compute instance yet: not a MIG device

  absl::StatusOr<ComputeInstanceInfo> ci = driver->CreateComputeInstance(gpu, gi->id, 1);
  ASSERT_TRUE(ci.ok());
  EXPECT_EQ(ci->profile, "1c.2g.20gb");
  EXPECT_THAT(ci->uuid, ::testing::StartsWith("MIG-"));
  EXPECT_FALSE(driver->CreateComputeInstance(gpu, gi->id, 2).ok());  // 1 slice left
  EXPECT_EQ(driver->CreateComputeInstance(gpu, gi->id, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(driver->DestroyGpuInstance(gpu, gi->id).message()),
              HasSubstr("destroy them first"));
  ASSERT_TRUE(driver->DestroyComputeInstance(gpu, gi->id, ci->id).ok());
  ASSERT_TRUE(driver->DestroyGpuInstance(gpu, gi->id).ok());
  EXPECT_EQ(driver->DestroyGpuInstance(gpu, gi->id).code(), absl::StatusCode::kNotFound);

  EXPECT_THAT(std::string(driver->SetMigMode(gpu, false).message()), HasSubstr("still has 1 MIG instance"));
}

TEST(SimulatedDriver, MigNeedsMigModeEnabled) {
  auto driver = Make("1xA100-40GB,1xL4");
  EXPECT_THAT(std::string(driver->CreateGpuInstance({"node-0", 0}, "1g.5gb", 0).status().message()),
              HasSubstr("MIG mode is disabled"));
  ASSERT_TRUE(driver->SetMigMode({"node-0", 0}, true).ok());
  EXPECT_TRUE(driver->CreateGpuInstance({"node-0", 0}, "1g.5gb", 0).ok());
  EXPECT_THAT(std::string(driver->SetMigMode({"node-0", 1}, true).message()), HasSubstr("L4 does not support MIG"));
}

TEST(SimulatedDriver, XidAndEccFaults) {
  auto driver = Make("4xA100-80GB,1xV100-16GB");
  ASSERT_TRUE(driver->InjectXid({"node-0", 0}, 13).ok());
  GpuHealthReading r = driver->ReadHealth({"node-0", 0}).value();
  EXPECT_EQ(r.xids, std::vector<int>{13});
  EXPECT_EQ(AssessHealth(r).state, HealthState::kHealthy);
  EXPECT_TRUE(driver->ReadHealth({"node-0", 0}).value().xids.empty());  // events are read once

  ASSERT_TRUE(driver->InjectEccError({"node-0", 1}, EccErrorKind::kSingleBit, 5).ok());
  EXPECT_EQ(AssessHealth(driver->ReadHealth({"node-0", 1}).value()).state, HealthState::kDegraded);

  ASSERT_TRUE(driver->InjectEccError({"node-0", 2}, EccErrorKind::kDoubleBit).ok());
  r = driver->ReadHealth({"node-0", 2}).value();
  EXPECT_EQ(r.ecc_uncorrectable, 1);
  EXPECT_TRUE(r.remap_pending);  // Ampere remaps rows
  EXPECT_EQ(r.xids, std::vector<int>{48});
  // Drained stays drained after the event has been read.
  EXPECT_EQ(driver->Discover().value()[0].gpus[2].health, HealthState::kDraining);

  ASSERT_TRUE(driver->InjectEccError({"node-0", 4}, EccErrorKind::kDoubleBit).ok());
  r = driver->ReadHealth({"node-0", 4}).value();
  EXPECT_TRUE(r.retirement_pending);  // Volta retires pages
  EXPECT_EQ(r.retired_pages, 1);

  ASSERT_TRUE(driver->Repair({"node-0", 2}).ok());
  EXPECT_EQ(driver->Discover().value()[0].gpus[2].health, HealthState::kHealthy);
}

TEST(SimulatedDriver, GpuFallingOffTheBus) {
  auto driver = Make("2xH100-80GB");
  ASSERT_TRUE(driver->SetMigMode({"node-0", 1}, true).ok());
  ASSERT_TRUE(driver->FallOffBus({"node-0", 1}).ok());
  GpuHealthReading r = driver->ReadHealth({"node-0", 1}).value();
  EXPECT_FALSE(r.reachable);
  EXPECT_EQ(AssessHealth(r).state, HealthState::kLost);
  EXPECT_EQ(driver->Discover().value()[0].gpus[1].health, HealthState::kLost);
  EXPECT_EQ(driver->CreateGpuInstance({"node-0", 1}, "1g.10gb", std::nullopt).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(driver->Discover().value()[0].gpus[0].health, HealthState::kHealthy);
}

TEST(SimulatedDriver, SilentCorruptionIsFoundOnlyByAMemoryTest) {
  auto driver = Make("1xH200-141GB");
  GpuRef gpu{"node-0", 0};
  ASSERT_TRUE(driver->RunMemoryTest(gpu).ok());
  ASSERT_TRUE(driver->InjectSilentCorruption(gpu).ok());
  EXPECT_TRUE(driver->CorruptsData(gpu));
  EXPECT_EQ(AssessHealth(driver->ReadHealth(gpu).value()).state, HealthState::kHealthy);
  EXPECT_EQ(driver->RunMemoryTest(gpu).code(), absl::StatusCode::kDataLoss);
  HealthVerdict v = AssessHealth(driver->ReadHealth(gpu).value());
  EXPECT_EQ(v.state, HealthState::kDraining);
  EXPECT_THAT(v.reasons, ::testing::Contains("silent data corruption detected"));
}

TEST(SimulatedDriver, ThermalThrottleDegrades) {
  auto driver = Make("1xL40S");
  ASSERT_TRUE(driver->SetThermalState({"node-0", 0}, kThrottleHwThermal, 92).ok());
  GpuHealthReading r = driver->ReadHealth({"node-0", 0}).value();
  EXPECT_EQ(r.temperature_c, 92);
  EXPECT_EQ(AssessHealth(r).state, HealthState::kDegraded);
}

TEST(SimulatedDriver, UnknownGpusAreNotFound) {
  auto driver = Make("1xL4");
  EXPECT_EQ(driver->ReadHealth({"node-0", 3}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(driver->InjectXid({"nowhere", 0}, 48).code(), absl::StatusCode::kNotFound);
}

TEST(SimulatedDriver, ImpossibleInitialLayoutIsRefused) {
  SimulatedPoolSpec spec = ParseSimulationSpec("1xH100-80GB").value();
  spec.nodes[0].gpus[0].mig_enabled = true;
  spec.nodes[0].gpus[0].mig_profiles = {"7g.80gb", "1g.10gb"};
  absl::StatusOr<std::unique_ptr<SimulatedDriver>> driver = SimulatedDriver::Create(spec);
  ASSERT_FALSE(driver.ok());
  EXPECT_THAT(std::string(driver.status().message()), HasSubstr("node node-0 GPU 0"));
}

}  // namespace
}  // namespace gpupool::pool
