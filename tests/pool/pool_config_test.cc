#include "pool/config/pool_config.h"

#include "absl/strings/str_cat.h"

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
           Case{"tenants: []\n", "top level: unknown key 'tenants'"},
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

namespace gpupool::pool {
namespace {

TEST(SchedulingConfig, DefaultsHaveThreeClassesAndNoTeams) {
  PoolConfig config = ParsePoolConfig("", "empty.yaml").value();
  ASSERT_EQ(config.scheduling.priority_classes.size(), 3u);
  const PriorityClass* inference = config.scheduling.FindClass("production-inference");
  ASSERT_NE(inference, nullptr);
  EXPECT_FALSE(inference->preemptible);
  EXPECT_TRUE(config.scheduling.FindClass("training")->preemptible);
  EXPECT_GT(config.scheduling.FindClass("training")->value, config.scheduling.FindClass("experiment")->value);
  EXPECT_TRUE(config.scheduling.teams.empty());
}

TEST(SchedulingConfig, ReadsGroupsClassesTeamsAndQuotas) {
  PoolConfig config = ParsePoolConfig(R"(
model_groups:
  hopper: [h100-80gb, H200-141GB]
priority_classes:
  - {name: urgent, value: 900, preemptible: false, grace_period_s: 60}
  - {name: batch, value: 10, checkpoint_interval_s: 300}
teams:
  - name: vision
    weight: 2
    run_as: vision-jobs
    cost_center: cc-4711
    quotas:
      - {gpus: hopper, nominal: 8, borrowing_limit: 4, lending_limit: 2.5}
      - {gpus: L4, nominal: 0.5}
  - name: nlp
)", "s.yaml").value();
  const SchedulingConfig& s = config.scheduling;
  EXPECT_EQ(s.GroupOf("H200-141GB"), "hopper");
  EXPECT_EQ(s.GroupOf("L4"), "L4");
  ASSERT_EQ(s.priority_classes.size(), 2u);
  EXPECT_TRUE(s.FindClass("batch")->preemptible);
  EXPECT_EQ(s.FindClass("batch")->checkpoint_interval_s, 300);
  const Team* vision = s.FindTeam("vision");
  ASSERT_NE(vision, nullptr);
  EXPECT_EQ(vision->weight, 2);
  EXPECT_EQ(vision->run_as, "vision-jobs");
  EXPECT_EQ(s.FindTeam("nlp")->run_as, "") << "no run_as: none";
  EXPECT_EQ(vision->cost_center, "cc-4711");
  EXPECT_EQ(s.FindTeam("nlp")->cost_center, "");
  const TeamQuota* hopper = vision->QuotaFor("hopper");
  ASSERT_NE(hopper, nullptr);
  EXPECT_EQ(hopper->nominal_milli, 8000);
  EXPECT_EQ(*hopper->borrowing_limit_milli, 4000);
  EXPECT_EQ(*hopper->lending_limit_milli, 2500);
  EXPECT_EQ(vision->QuotaFor("L4")->nominal_milli, 500);
  EXPECT_FALSE(vision->QuotaFor("L4")->lending_limit_milli.has_value());
  EXPECT_TRUE(s.FindTeam("nlp")->quotas.empty());
}

TEST(SchedulingConfig, InvalidFieldsAreNamed) {
  struct Case { const char* yaml; const char* why; };
  for (const Case& c : {
           Case{"teams:\n  - name: a\n    quotas: [{gpus: L4, nominal: -2}]\n",
                "teams[0].quotas[0].nominal: -2 is negative"},
           Case{"teams:\n  - name: a\n    quotas: [{gpus: L4, nominal: 2, lending_limit: 3}]\n",
                "teams[0].quotas[0].lending_limit: lending limit 3 exceeds the nominal quota 2"},
           Case{"teams:\n  - name: a\n    quotas: [{gpus: H100, nominal: 2}]\n",
                "teams[0].quotas[0].gpus: 'H100' is neither a model group nor a GPU model"},
           Case{"model_groups: {big: [H100]}\n", "model_groups.big[0]: unknown GPU model 'H100'"},
           Case{"model_groups: {big: [H100-80GB]}\nteams:\n  - name: a\n    quotas: [{gpus: H100-80GB, nominal: 1}]\n",
                "belongs to model group 'big'"},
           Case{"teams:\n  - name: a\n  - name: a\n", "team 'a' is defined twice"},
           Case{"teams:\n  - name: a\n    weight: 0\n", "teams[0].weight: must be greater than 0"},
           Case{"teams:\n  - name: a\n    run_as: ../root\n", "teams[0].run_as: '../root' is not a user name"},
           Case{"teams:\n  - name: a\n    run_as: 1000\n", "teams[0].run_as: '1000' is not a user name"},
           Case{"teams:\n  - name: a\n    run_as: \"-u root\"\n", "teams[0].run_as: '-u root' is not a user name"},
           Case{"teams:\n  - name: a\n    run_as: \"\"\n", "teams[0].run_as: '' is not a user name"},
           Case{"teams:\n  - name: operators\n", "teams[0].name: 'operators' is reserved"},
           Case{"teams:\n  - name: agents\n", "teams[0].name: 'agents' is reserved"},
           Case{"teams:\n  - name: \"model:L4\"\n", "teams[0].name: 'model:L4': a team's name must not start with 'model:'"},
           Case{"teams:\n  - name: a\n    cost_center: ''\n", "teams[0].cost_center: must not be empty"},
           Case{"priority_classes:\n  - {name: x}\n", "priority_classes[0]: needs a name and a value"},
           Case{"priority_classes:\n  - {name: x, value: 1, preemptible: maybe}\n",
                "priority_classes[0].preemptible: must be true or false"},
           Case{"priority_classes:\n  - {name: x, value: 1, grace_period_s: -5}\n",
                "priority_classes[0].grace_period_s: -5 is outside"},
       }) {
    absl::StatusOr<PoolConfig> config = ParsePoolConfig(c.yaml, "s.yaml");
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_THAT(std::string(config.status().message()), ::testing::HasSubstr(c.why)) << c.yaml;
  }
}

// A pool of 8 H100 with two teams; `reserve` and the quotas vary.
std::string ReservePool(const std::string& reserve, int nominal_a = 3, int nominal_b = 3) {
  return absl::StrCat("nodes:\n  - {name: n, count: 2, gpus: [{model: H100-80GB, count: 4}]}\n",
                      "priority_classes:\n  - {name: urgent, value: 2000}\n  - {name: training, value: 500}\n",
                      "teams:\n  - {name: a, quotas: [{gpus: H100-80GB, nominal: ", nominal_a, "}]}\n",
                      "  - {name: b, quotas: [{gpus: H100-80GB, nominal: ", nominal_b, "}]}\n", reserve);
}

TEST(SchedulingConfig, ReadsSpareReserves) {
  absl::StatusOr<PoolConfig> config =
      ParsePoolConfig(ReservePool("reserve:\n  - {group: H100-80GB, gpus: 2, for_priority_at_least: urgent}\n"), "r.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->scheduling.reserves.size(), 1u);
  EXPECT_EQ(config->scheduling.reserves[0].group, "H100-80GB");
  EXPECT_EQ(config->scheduling.reserves[0].gpus, 2);
  EXPECT_EQ(config->scheduling.reserves[0].for_priority_at_least, "urgent");
  // The nominal quotas may total exactly the capacity minus the reserve.
  config = ParsePoolConfig(ReservePool("reserve:\n  - {group: H100-80GB, gpus: 2, for_priority_at_least: urgent}\n", 4, 2),
                           "r.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(SchedulingConfig, InvalidReservesAreNamed) {
  struct Case { std::string yaml; const char* why; };
  for (const Case& c : {
           Case{ReservePool("reserve:\n  - {group: H100, gpus: 1, for_priority_at_least: urgent}\n"),
                "reserve[0].group: 'H100' is neither a model group nor a GPU model"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: 1, for_priority_at_least: urgnet}\n"),
                "reserve[0].for_priority_at_least: unknown priority class 'urgnet' (classes: urgent, training)"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: -1, for_priority_at_least: urgent}\n"),
                "reserve[0].gpus: -1 is outside"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: 9, for_priority_at_least: urgent}\n", 0, 0),
                "reserve[0].gpus: a reserve of 9 GPUs exceeds the 8 GPUs of 'H100-80GB' in this pool"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: 3, for_priority_at_least: urgent}\n"),
                "reserve[0].gpus: the teams' nominal quotas for 'H100-80GB' total 6 GPUs, more than its capacity "
                "minus the reserve (8 - 3 = 5)"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: 1, for_priority_at_least: urgent}\n"
                            "  - {group: H100-80GB, gpus: 1, for_priority_at_least: urgent}\n"),
                "reserve[1].group: a second reserve for 'H100-80GB'"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: 1}\n"), "reserve[0]: needs group"},
           Case{ReservePool("reserve:\n  - {group: H100-80GB, gpus: 1, for_priority_at_least: urgent, model: x}\n"),
                "reserve[0]"},
           Case{ReservePool("reserve: {group: H100-80GB}\n"), "reserve: must be a list"},
           Case{"model_groups: {hopper: [H100-80GB]}\n"
                "reserve:\n  - {group: H100-80GB, gpus: 1, for_priority_at_least: training}\n",
                "reserve[0].group: H100-80GB belongs to model group 'hopper': write the reserve against the group"},
       }) {
    absl::StatusOr<PoolConfig> config = ParsePoolConfig(c.yaml, "r.yaml");
    ASSERT_FALSE(config.ok()) << c.yaml;
    EXPECT_THAT(std::string(config.status().message()), ::testing::HasSubstr(c.why)) << c.yaml;
    EXPECT_THAT(std::string(config.status().message()), ::testing::StartsWith("r.yaml:")) << c.yaml;
  }
}

TEST(SchedulingConfig, ReservesAreCheckedAgainstTheCapacityTheHeadFinds) {
  // Without `nodes:` the file cannot know the capacity: the head checks against its GPUs.
  absl::StatusOr<PoolConfig> config = ParsePoolConfig(
      "teams:\n  - {name: a, quotas: [{gpus: L4, nominal: 3}]}\n"
      "reserve:\n  - {group: L4, gpus: 2, for_priority_at_least: production-inference}\n",
      "r.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(CheckSpareReserves(config->scheduling, {{"L4", 5}}).ok());
  absl::Status small = CheckSpareReserves(config->scheduling, {{"L4", 4}, {"H100-80GB", 8}});
  EXPECT_THAT(std::string(small.message()),
              ::testing::HasSubstr("reserve[0].gpus: the teams' nominal quotas for 'L4' total 3 GPUs, more than "
                                   "its capacity minus the reserve (4 - 2 = 2)"));
  EXPECT_THAT(std::string(CheckSpareReserves(config->scheduling, {}).message()),
              ::testing::HasSubstr("a reserve of 2 GPUs exceeds the 0 GPUs of 'L4'"));
}

}  // namespace
}  // namespace gpupool::pool
