#include "pool/sim/lease_simulation.h"

#include <gtest/gtest.h>

#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"

namespace gpupool::pool::sim {
namespace {

constexpr char kPool[] = R"(
nodes:
  - {name: n, count: 4, gpus: [{model: H100-80GB, count: 8}]}
teams:
  - {name: a, quotas: [{gpus: H100-80GB, nominal: 8}]}
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 8}]}
  - {name: c, quotas: [{gpus: H100-80GB, nominal: 8}]}
  - {name: d, quotas: [{gpus: H100-80GB, nominal: 8}]}
)";

class LeaseSimulationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = ParsePoolConfig(kPool, "t.yaml").value();
    auto driver = SimulatedDriver::Create(*config_.simulated_nodes).value();
    inventory_ = std::make_unique<Inventory>(Inventory::FromDiscovery(driver->Discover().value()).value());
    jobs_ = GenerateTeamWorkload(config_.scheduling, "H100-80GB", {.weeks = 3, .seed = 7});
  }
  PoolConfig config_;
  std::unique_ptr<Inventory> inventory_;
  std::vector<SimJob> jobs_;
};

TEST_F(LeaseSimulationTest, WorkloadIsDeterministicAndBursty) {
  EXPECT_FALSE(jobs_.empty());
  std::vector<SimJob> again = GenerateTeamWorkload(config_.scheduling, "H100-80GB", {.weeks = 3, .seed = 7});
  ASSERT_EQ(again.size(), jobs_.size());
  for (size_t i = 0; i < jobs_.size(); ++i) {
    EXPECT_EQ(again[i].request.id, jobs_[i].request.id);
    EXPECT_EQ(again[i].arrival_s, jobs_[i].arrival_s);
  }
  int sprint = 0;
  for (const SimJob& j : jobs_) sprint += j.sprint;
  EXPECT_GT(sprint, 0);
}

TEST_F(LeaseSimulationTest, PoolingRaisesUtilisationWithoutDelayingGuaranteedWork) {
  LeaseSimulationResult dedicated = SimulateLeases(*inventory_, config_.scheduling, jobs_, {.pooled = false});
  LeaseSimulationResult pooled = SimulateLeases(*inventory_, config_.scheduling, jobs_, {.pooled = true});
  EXPECT_GT(pooled.mean_utilisation, dedicated.mean_utilisation);
  EXPECT_LE(pooled.mean_utilisation, 1.0);
  // Dedicated teams never exceed their own quota (preemptions there are within a team, training
  // displacing its own experiments).
  for (const TeamFigures& t : dedicated.teams) {
    EXPECT_LE(t.received_gpu_hours, 8 * dedicated.horizon_hours + 1e-6) << t.team;
  }
  // Guaranteed requests wait at most for borrowers to reach a safe point (30 s), well within the
  // longest grace period.
  EXPECT_GT(pooled.guaranteed_requests, 0);
  EXPECT_EQ(pooled.guaranteed_within_grace, 1.0) << "max delay " << pooled.guaranteed_delay_max_s;
  EXPECT_GT(pooled.jain_fairness, 0.5);
}

TEST_F(LeaseSimulationTest, SameJobsSameResult) {
  LeaseSimulationResult a = SimulateLeases(*inventory_, config_.scheduling, jobs_, {.pooled = true});
  LeaseSimulationResult b = SimulateLeases(*inventory_, config_.scheduling, jobs_, {.pooled = true});
  EXPECT_EQ(a.mean_utilisation, b.mean_utilisation);
  EXPECT_EQ(a.preemptions, b.preemptions);
  EXPECT_EQ(a.jobs_completed, b.jobs_completed);
}

}  // namespace
}  // namespace gpupool::pool::sim
