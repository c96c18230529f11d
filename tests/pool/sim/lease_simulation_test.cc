#include "pool/sim/lease_simulation.h"

#include <algorithm>
#include <cmath>

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

TEST_F(LeaseSimulationTest, UtilisationIsBusyHoursBoundedByHeldHoursAndTheOfferedLoad) {
  for (bool pooled : {false, true}) {
    LeaseSimulationResult r = SimulateLeases(*inventory_, config_.scheduling, jobs_, {.pooled = pooled});
    EXPECT_GT(r.mean_utilisation, 0) << r.mode;
    // Busy hours are held hours less what preemption wasted there.
    const double capacity_hours = r.capacity_gpus * r.horizon_hours;
    EXPECT_NEAR(r.held_utilisation - r.mean_utilisation,
                (r.lost_gpu_hours + r.restart_gpu_hours) / capacity_hours, 1e-9) << r.mode;
    // No run does more work than was asked for.
    EXPECT_LE(r.mean_utilisation, r.offered_load + 1e-9) << r.mode;
    // The days' figures cover the horizon and, weighted by each day's length, add up to it.
    ASSERT_EQ(r.held_by_day.size(), static_cast<size_t>(std::ceil(r.horizon_hours / 24 - 1e-9))) << r.mode;
    double held_hours = 0;
    for (size_t day = 0; day < r.held_by_day.size(); ++day) {
      EXPECT_GE(r.held_by_day[day], 0) << r.mode;
      EXPECT_LE(r.held_by_day[day], 1 + 1e-9) << r.mode;
      held_hours += r.held_by_day[day] * std::min(24.0, r.horizon_hours - 24.0 * static_cast<double>(day));
    }
    EXPECT_NEAR(held_hours / r.horizon_hours, r.held_utilisation, 1e-9) << r.mode;
  }
}

// Two teams of one GPU each; b's long checkpointable job borrows a's idle GPU, a asks for it back.
// The borrower stops at its safe point, keeps its progress and pays the restart (the time it
// spends loading its checkpoint), which busy utilisation leaves out.
TEST(LeaseSimulation, APreemptedCheckpointableJobKeepsItsWorkAndPaysTheRestart) {
  PoolConfig config = ParsePoolConfig(R"(
nodes:
  - {name: n, count: 1, gpus: [{model: H100-80GB, count: 2}]}
teams:
  - {name: a, quotas: [{gpus: H100-80GB, nominal: 1}]}
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 1}]}
)", "t.yaml").value();
  auto driver = SimulatedDriver::Create(*config.simulated_nodes).value();
  Inventory inventory = Inventory::FromDiscovery(driver->Discover().value()).value();
  auto job = [](const std::string& id, const std::string& team, int64_t at, int64_t work) {
    SimJob j;
    j.request.id = id;
    j.request.team = team;
    j.request.priority_class = "training";
    j.arrival_s = at;
    j.work_s = work;
    return j;
  };
  std::vector<SimJob> jobs = {job("b-own", "b", 0, 7200), job("b-borrow", "b", 0, 7200),
                              job("a-back", "a", 3600, 3600)};
  LeaseSimulationOptions options{.pooled = true, .horizon_s = 4 * 3600, .safe_point_s = 30,
                                 .restart_overhead_s = 60};
  LeaseSimulationResult r = SimulateLeases(inventory, config.scheduling, jobs, options);
  EXPECT_EQ(r.preemptions, 1);
  EXPECT_EQ(r.lost_gpu_hours, 0);
  EXPECT_NEAR(r.restart_gpu_hours, 60.0 / 3600, 1e-9);
  EXPECT_EQ(r.jobs_completed, 3);
  // a's request was within its nominal quota: admitted when the borrower stopped, 30 s later,
  // within the training class's 120 s grace period. (b's two requests were guaranteed when
  // admitted too: b-own at once, the requeued borrower when b-own had finished.)
  EXPECT_EQ(r.guaranteed_requests, 3);
  EXPECT_EQ(r.guaranteed_delay_max_s, 30);
  EXPECT_EQ(r.guaranteed_within_grace, 1.0);
  // 2 h + 2 h + 1 h of work, plus the restart, over 2 GPUs x 4 h.
  EXPECT_NEAR(r.held_utilisation, (5 * 3600.0 + 60) / (2 * 4 * 3600), 1e-9);
  EXPECT_NEAR(r.mean_utilisation, 5.0 / 8, 1e-9);
  EXPECT_NEAR(r.offered_load, 5.0 / 8, 1e-9);
  // Nothing waited while a GPU was free, except a-back for the borrower's safe point.
  EXPECT_NEAR(r.idle_while_waiting_gpu_hours, 0, 1e-9);
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
