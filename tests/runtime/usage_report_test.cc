// Chargeback arithmetic (runtime/service/usage_report.h): regrouping the ledger's cells, prices
// per model, half-even cents, idle as the remainder, idle shared by use, and a team's view; the
// unavailable GPU-hours that the history samples record (sampled_unavailability.h).
#include "runtime/service/usage_report.h"
#include "runtime/service/sampled_unavailability.h"
#include "runtime/service/savings_report.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpupool::runtime {
namespace {

using nlohmann::json;

pool::PoolConfig Config() {
  absl::StatusOr<pool::PoolConfig> c = pool::ParsePoolConfig(R"(
prices: {H100-80GB: 3.0, L4: 0.7}
teams:
  - {name: vision, cost_center: cc-1}
  - {name: nlp, cost_center: cc-1}
  - {name: search}
)", "t.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

UsageCell Cell(std::string team, std::string project, std::string model, double hours) {
  return UsageCell{.team = std::move(team), .project = std::move(project), .workload_class = "training",
                   .priority_class = "training", .gpu_model = std::move(model), .gpu_hours = hours, .leases = 1};
}

int64_t SumOfParts(const json& r) {
  int64_t cents = r["idle"]["cost_cents"].get<int64_t>() + r["unavailable"]["cost_cents"].get<int64_t>();
  for (const json& row : r["rows"]) cents += row["cost_cents"].get<int64_t>();
  if (r.contains("other_teams")) cents += r["other_teams"]["cost_cents"].get<int64_t>();
  return cents;
}

TEST(RoundCentsHalfEven, HalvesGoToTheEvenCent) {
  EXPECT_EQ(RoundCentsHalfEven(0.125), 12);
  EXPECT_EQ(RoundCentsHalfEven(0.375), 38);
  EXPECT_EQ(RoundCentsHalfEven(2.5), 250);
  EXPECT_EQ(RoundCentsHalfEven(0.0049), 0);
}

TEST(UsageReport, RowsUnavailableAndIdleAddUpToCapacityToTheCent) {
  // Awkward fractions, so that every row's rounding matters.
  std::vector<UsageCell> cells = {Cell("vision", "a", "H100-80GB", 1.0 / 3), Cell("vision", "b", "H100-80GB", 2.0 / 7),
                                  Cell("nlp", "a", "L4", 5.0 / 9), Cell("search", "x", "H100-80GB", 0.1234567)};
  UsageCapacity capacity{.declared_gpu_hours = {{"H100-80GB", 10.0 / 3}, {"L4", 7.0 / 3}},
                         .unavailable_gpu_hours = {{"L4", 1.0 / 6}}};
  UsageQuery q{.from_s = 1000, .to_s = 1000 + 3600 * 5.0 / 3, .group_by = "project"};
  absl::StatusOr<json> r = UsageReport(cells, q, Viewer::Operator(), Config(), capacity);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(SumOfParts(*r), (*r)["capacity"]["cost_cents"].get<int64_t>());
  EXPECT_EQ((*r)["capacity"]["cost_cents"], RoundCentsHalfEven(10.0 / 3 * 3.0 + 7.0 / 3 * 0.7));
  ASSERT_EQ((*r)["rows"].size(), 3u);  // a, b, x
  EXPECT_EQ((*r)["rows"][0]["group"], "a");
  EXPECT_EQ((*r)["rows"][0]["cost_cents"], RoundCentsHalfEven(3.0 / 3 + 0.7 * 5 / 9));
  EXPECT_EQ((*r)["unavailable"]["cost_cents"], RoundCentsHalfEven(0.7 / 6));

  q.idle_share = true;
  absl::StatusOr<json> shared = UsageReport(cells, q, Viewer::Operator(), Config(), capacity);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(SumOfParts(*shared), (*shared)["capacity"]["cost_cents"].get<int64_t>());
  EXPECT_LE(std::abs((*shared)["idle"]["cost_cents"].get<int64_t>()), 3) << "only rounding leftovers stay idle";
  EXPECT_GT((*shared)["rows"][0]["cost_cents"].get<int64_t>(), (*r)["rows"][0]["cost_cents"].get<int64_t>());
}

TEST(UsageReport, CostCentersDefaultToTheTeamsName) {
  std::vector<UsageCell> cells = {Cell("vision", "a", "H100-80GB", 1), Cell("nlp", "a", "H100-80GB", 1),
                                  Cell("search", "a", "H100-80GB", 1)};
  absl::StatusOr<json> r =
      UsageReport(cells, UsageQuery{.from_s = 0, .to_s = 10, .group_by = "cost-center"}, Viewer::Operator(), Config(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["rows"].size(), 2u);
  EXPECT_EQ((*r)["rows"][0]["group"], "cc-1");
  EXPECT_DOUBLE_EQ((*r)["rows"][0]["gpu_hours"].get<double>(), 2);
  EXPECT_EQ((*r)["rows"][0]["cost_cents"], 600);
  EXPECT_EQ((*r)["rows"][1]["group"], "search");
  EXPECT_FALSE(r->contains("capacity")) << "an unbounded period has no capacity";
}

TEST(UsageReport, JobsGroupByNameAndLeasesFromBeforeTheLedgerKeptThemShowSo) {
  UsageCell a = Cell("vision", "p", "H100-80GB", 1), b = Cell("vision", "q", "H100-80GB", 2),
            old = Cell("nlp", "p", "L4", 4);
  a.job = b.job = "job-node0-42";  // two projects of one job
  absl::StatusOr<json> r =
      UsageReport({a, b, old}, UsageQuery{.from_s = 0, .to_s = 10, .group_by = "job"}, Viewer::Operator(), Config(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["rows"].size(), 2u) << r->dump();
  EXPECT_EQ((*r)["rows"][0]["group"], "(not recorded)");
  EXPECT_DOUBLE_EQ((*r)["rows"][0]["gpu_hours"].get<double>(), 4);
  EXPECT_EQ((*r)["rows"][1]["group"], "job-node0-42");
  EXPECT_DOUBLE_EQ((*r)["rows"][1]["gpu_hours"].get<double>(), 3);
  EXPECT_EQ((*r)["rows"][1]["cost_cents"], 900);
}

// seff's efficiency: busy over leased, of the leases whose job said how long they were busy; a row
// none of whose leases did has no efficiency (null), not 0.
TEST(UsageReport, EfficiencyIsBusyOverTheMeasuredPartOnly) {
  UsageCell measured = Cell("vision", "p", "H100-80GB", 4), unknown = Cell("vision", "p", "H100-80GB", 6),
            silent = Cell("nlp", "p", "H100-80GB", 1);
  measured.measured_gpu_hours = 4;
  measured.busy_gpu_hours = 3;
  absl::StatusOr<json> r = UsageReport({measured, unknown, silent}, UsageQuery{.from_s = 0, .to_s = 10},
                                       Viewer::Operator(), Config(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["rows"].size(), 2u);
  EXPECT_EQ((*r)["rows"][0]["group"], "nlp");
  EXPECT_TRUE((*r)["rows"][0]["efficiency"].is_null());
  EXPECT_EQ((*r)["rows"][1]["group"], "vision");
  EXPECT_DOUBLE_EQ((*r)["rows"][1]["gpu_hours"].get<double>(), 10);
  EXPECT_DOUBLE_EQ((*r)["rows"][1]["busy_gpu_hours"].get<double>(), 3);
  EXPECT_DOUBLE_EQ((*r)["rows"][1]["efficiency"].get<double>(), 0.75) << "3 busy of the 4 measured, not of 10";
}

TEST(UsageReport, ATeamSeesItsRowsAndTheOthersAsOneLine) {
  std::vector<UsageCell> cells = {Cell("vision", "a", "H100-80GB", 1), Cell("nlp", "secret", "L4", 2)};
  absl::StatusOr<json> r =
      UsageReport(cells, UsageQuery{.from_s = 0, .to_s = 10, .group_by = "project"}, Viewer::Team("vision"), Config(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["rows"].size(), 1u);
  EXPECT_EQ((*r)["rows"][0]["group"], "a");
  EXPECT_EQ((*r)["other_teams"]["cost_cents"], 140);
  EXPECT_EQ(r->dump().find("secret"), std::string::npos) << "another team's project is not named";
}

TEST(UsageReport, BadGroupingsAndEmptyPeriodsAreRefusedByName) {
  absl::StatusOr<json> r = UsageReport({}, UsageQuery{.from_s = 0, .to_s = 10, .group_by = "colour"},
                                       Viewer::Operator(), Config(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("cannot group usage by 'colour'"));
  r = UsageReport({}, UsageQuery{.from_s = 10, .to_s = 10, .group_by = "team"}, Viewer::Operator(), Config(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("is empty"));
}

}  // namespace
}  // namespace gpupool::runtime

namespace gpupool::runtime {
namespace {

// Savings (savings_report.h): peaks and p95s from overlapping holds, and the fleets' costs.
TEST(SavingsReport, PeakAndP95FromOverlappingHoldsAgainstThePooledFleet) {
  pool::PoolConfig config = Config();  // H100-80GB at 3.0 USD per hour
  // Over 100 hours: vision holds 1 GPU throughout and a second one for 3 hours (peak 2, p95 1);
  // nlp holds 0.5 GPU for 50 hours (peak 0.5 -> owns 1, p95 0.5 -> owns 1).
  const double h = 3600;
  std::vector<HoldInterval> holds = {{"vision", "H100-80GB", 1, 0, 100 * h},
                                     {"vision", "H100-80GB", 1, 10 * h, 13 * h},
                                     {"nlp", "H100-80GB", 0.5, 0, 50 * h}};
  absl::StatusOr<json> r = SavingsReport(holds, 0, 100 * h, Viewer::Operator(), config, {{"H100-80GB", 2}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)["teams"].size(), 2u);
  const json& nlp = (*r)["teams"][0];
  const json& vision = (*r)["teams"][1];
  EXPECT_EQ(vision["team"], "vision");
  EXPECT_DOUBLE_EQ(vision["peak_gpus"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(vision["p95_gpus"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(vision["gpu_hours"].get<double>(), 103);
  EXPECT_DOUBLE_EQ(nlp["p95_gpus"].get<double>(), 0.5);
  EXPECT_EQ(nlp["dedicated_gpus_p95"], 1);
  EXPECT_EQ((*r)["pooled"]["cost_cents"], 2 * 100 * 300);
  EXPECT_EQ((*r)["dedicated_peak"]["cost_cents"], 3 * 100 * 300);  // vision 2 + nlp 1
  EXPECT_EQ((*r)["dedicated_p95"]["cost_cents"], 2 * 100 * 300);
  EXPECT_EQ((*r)["saved_vs_peak_cents"], 100 * 300);
  EXPECT_DOUBLE_EQ((*r)["pooled"]["utilisation"].get<double>(), 128.0 / 200);
  EXPECT_DOUBLE_EQ((*r)["dedicated_peak"]["utilisation"].get<double>(), 128.0 / 300);

  absl::StatusOr<json> mine = SavingsReport(holds, 0, 100 * h, Viewer::Team("nlp"), config, {{"H100-80GB", 2}});
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ((*mine)["teams"].size(), 1u);
  EXPECT_EQ((*mine)["teams"][0]["team"], "nlp");
  EXPECT_EQ((*mine)["saved_vs_peak_cents"], 100 * 300) << "the fleets' totals are pool-wide";
}

// One history sample as the head writes it: the pool row and one row per model (schedulable GPUs).
std::vector<HistoryRow> Sample(double t, std::map<std::string, double> schedulable) {
  double all = 0;
  for (const auto& [model, n] : schedulable) all += n;
  std::vector<HistoryRow> rows = {HistoryRow{.t_s = t, .scope = "pool", .capacity_gpus = all}};
  for (const auto& [model, n] : schedulable) rows.push_back({.t_s = t, .scope = "model:" + model, .capacity_gpus = n});
  rows.push_back({.t_s = t, .scope = "vision", .capacity_gpus = 7});  // a team's quota: not the pool's
  return rows;
}

void Append(std::vector<HistoryRow>& rows, const std::vector<HistoryRow>& more) {
  rows.insert(rows.end(), more.begin(), more.end());
}

// Samples a minute apart (a little more, as the head's timer fires) stand for the time until the
// next; per model, the declared GPUs that were not schedulable are unavailable.
TEST(SampledUnavailability, EachSampleCountsItsModelsDownGpusUntilTheNext) {
  std::vector<HistoryRow> rows;
  Append(rows, Sample(1000, {{"H100-80GB", 1}, {"L4", 2}}));
  Append(rows, Sample(1060.5, {{"H100-80GB", 2}, {"L4", 0}}));
  Append(rows, Sample(1121, {{"H100-80GB", 2}, {"L4", 2}}));
  SampledUnavailability u = UnavailableFromHistory(rows, {{"H100-80GB", 2}, {"L4", 2}}, 1030, 1181, 60);
  EXPECT_DOUBLE_EQ(u.gpu_hours["H100-80GB"], 1 * 30.5 / 3600);  // from the period's start to the second sample
  EXPECT_DOUBLE_EQ(u.gpu_hours["L4"], 2 * 60.5 / 3600);
  EXPECT_TRUE(u.unsampled.empty()) << "the newest sample stands for one interval, to the period's end";
}

// Across a restart of the head the last sample before it stands for one interval; the time after,
// before the first sample and after the newest are left to the head's in-memory record.
TEST(SampledUnavailability, ARestartAndTheEndsAreLeftUnsampled) {
  std::vector<HistoryRow> rows;
  Append(rows, Sample(1000, {{"H100-80GB", 0}}));
  Append(rows, Sample(1060, {{"H100-80GB", 0}}));
  Append(rows, Sample(2000, {{"H100-80GB", 1}}));  // the head was down from about 1120
  SampledUnavailability u = UnavailableFromHistory(rows, {{"H100-80GB", 2}}, 900, 3000, 60);
  EXPECT_DOUBLE_EQ(u.gpu_hours["H100-80GB"], (2 * 120 + 1 * 60) / 3600.0);
  EXPECT_THAT(u.unsampled, ::testing::ElementsAre(std::pair<double, double>(900, 1000),
                                                  std::pair<double, double>(1120, 2000),
                                                  std::pair<double, double>(2060, 3000)));
}

// A sample from before the history kept per-model rows cannot say which model was down: it covers
// nothing. A model with no row of its own in a sample had none schedulable. Without sampling, the
// whole period is unsampled.
TEST(SampledUnavailability, SamplesWithoutPerModelRowsCoverNothing) {
  std::vector<HistoryRow> rows = {HistoryRow{.t_s = 1000, .scope = "pool", .capacity_gpus = 1}};
  Append(rows, Sample(1060, {{"H100-80GB", 2}}));
  SampledUnavailability u = UnavailableFromHistory(rows, {{"H100-80GB", 2}, {"L4", 1}}, 1000, 1120, 60);
  EXPECT_DOUBLE_EQ(u.gpu_hours["L4"], 60 / 3600.0);
  EXPECT_EQ(u.gpu_hours.count("H100-80GB"), 0u);
  EXPECT_THAT(u.unsampled, ::testing::ElementsAre(std::pair<double, double>(1000, 1060)));
  SampledUnavailability off = UnavailableFromHistory(rows, {{"H100-80GB", 2}}, 1000, 1120, 0);
  EXPECT_TRUE(off.gpu_hours.empty());
  EXPECT_THAT(off.unsampled, ::testing::ElementsAre(std::pair<double, double>(1000, 1120)));
}

}  // namespace
}  // namespace gpupool::runtime
