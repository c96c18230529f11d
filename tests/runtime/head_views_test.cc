// Who sees what (DESIGN §6): a real head over loopback RPC with two teams holding leases and a
// request pending; the operators' token sees every row, a team's token the pool's totals and its
// own rows only, and a token that is nobody's sees nothing. Chargeback's `unavailable` read back
// from the journal's history by a head started after it was written.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/client/head_report.h"
#include "runtime/client/remote_pool.h"
#include "runtime/service/journal/head_journal.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/test_head.h"

namespace gpupool::runtime {
namespace {

using nlohmann::json;

constexpr char kTwoTeams[] = R"(
model_groups:
  gpus: [H100-80GB]
priority_classes:
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
teams:
  - name: vision
    cost_center: cc-vision
    quotas: [{gpus: gpus, nominal: 1}]
  - name: nlp
    cost_center: cc-nlp
    quotas: [{gpus: gpus, nominal: 1}]
)";

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class HeadViews : public ::testing::Test {
 protected:
  void SetUp() override {
    journal_ = ::testing::TempDir() + "/head-views-" + std::to_string(::getpid()) + ".db";
    std::remove(journal_.c_str());
    PoolServiceOptions po;
    po.pool.simulate = "2xH100-80GB";
    po.config_text = kTwoTeams;
    PoolServerOptions so;
    so.team_tokens = {{"vision", "vision-token-0123456789"}, {"nlp", "nlp-token-0123456789"}};
    so.operator_token = "ops-token-0123456789";
    so.journal_path = journal_;
    head_ = StartHead(po, so);
    ASSERT_NE(head_, nullptr);
    since_ = WallNow() - 1;
    vision_ = Join("vision", "vision-token-0123456789");
    nlp_ = Join("nlp", "nlp-token-0123456789");
    ASSERT_TRUE(vision_ && nlp_);
    ASSERT_TRUE(vision_->Request(Req("vision-train"), &vision_heard_).ok());
    ASSERT_TRUE(vision_heard_.WaitFor("granted"));
    ASSERT_TRUE(nlp_->Request(Req("nlp-train"), &nlp_heard_).ok());
    ASSERT_TRUE(nlp_heard_.WaitFor("granted"));
    // The pool is full: this one waits.
    ASSERT_TRUE(nlp_->Request(Req("nlp-more"), &nlp_waits_).ok());
    for (int i = 0; i < 200 && head_->pool().pending_requests() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  void TearDown() override {
    vision_.reset();
    nlp_.reset();
    head_.reset();
    std::remove(journal_.c_str());
  }
  std::unique_ptr<PoolClient> Join(const std::string& team, const std::string& token) {
    auto c = RemotePool::Connect({.port = head_->port(), .team = team, .token = token});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  json Report(const std::string& token) {
    absl::StatusOr<std::string> r = FetchHeadReport("127.0.0.1", head_->port(), token);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? json::parse(*r) : json();
  }
  static std::set<std::string> Teams(const json& rows) {
    std::set<std::string> teams;
    for (const json& r : rows) teams.insert(r["team"].get<std::string>());
    return teams;
  }

  std::string journal_;
  std::unique_ptr<PoolServer> head_;
  double since_ = 0;
  Recorder vision_heard_, nlp_heard_, nlp_waits_;  // outlive the jobs
  std::unique_ptr<PoolClient> vision_, nlp_;
};

TEST_F(HeadViews, TheOperatorsTokenSeesEveryTeamsRows) {
  json all = Report("ops-token-0123456789");
  EXPECT_EQ(all["viewer"], "pool");
  EXPECT_EQ(Teams(all["leases"]), (std::set<std::string>{"nlp", "vision"}));
  EXPECT_EQ(Teams(all["pending"]), (std::set<std::string>{"nlp"}));
  EXPECT_EQ(all["totals"]["leases"], 2);
  EXPECT_EQ(all["totals"]["pending"], 1);
}

TEST_F(HeadViews, ATeamsTokenSeesThePoolsTotalsAndItsOwnRowsOnly) {
  json vision = Report("vision-token-0123456789");
  EXPECT_EQ(vision["viewer"], "vision");
  EXPECT_EQ(Teams(vision["leases"]), (std::set<std::string>{"vision"}));
  EXPECT_TRUE(vision["pending"].empty()) << "nlp's pending request is not vision's to see";
  EXPECT_EQ(vision["totals"]["leases"], 2) << "the pool-wide aggregates are";
  EXPECT_EQ(vision["totals"]["pending"], 1);
  // Every GPU is listed with its health, but only vision's lease ids appear on them.
  int gpus = 0, leases_shown = 0;
  for (const json& n : vision["nodes"]) {
    for (const json& g : n["gpus"]) {
      ++gpus;
      leases_shown += static_cast<int>(g["leases"].size());
    }
  }
  EXPECT_EQ(gpus, 2);
  EXPECT_EQ(leases_shown, 1);

  json nlp = Report("nlp-token-0123456789");
  EXPECT_EQ(Teams(nlp["leases"]), (std::set<std::string>{"nlp"}));
  EXPECT_EQ(Teams(nlp["pending"]), (std::set<std::string>{"nlp"}));
}

TEST_F(HeadViews, ATokenThatIsNobodysSeesNothing) {
  absl::StatusOr<std::string> r = FetchHeadReport("127.0.0.1", head_->port(), "ops-token-01234567890");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("describe needs the operators'"));
  absl::StatusOr<std::string> u = FetchHeadUsage("127.0.0.1", head_->port(), "", 0, WallNow(), "team");
  ASSERT_FALSE(u.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(u.status())) << u.status();
}

TEST_F(HeadViews, UsageShowsATeamItsOwnRowsAndTheOthersAsOneLine) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // some GPU-time to count
  const double until = WallNow();
  absl::StatusOr<std::string> ops = FetchHeadUsage("127.0.0.1", head_->port(), "ops-token-0123456789", since_, until,
                                                   "cost-center");
  ASSERT_TRUE(ops.ok()) << ops.status();
  json all = json::parse(*ops);
  std::set<std::string> groups;
  for (const json& r : all["rows"]) groups.insert(r["group"].get<std::string>());
  EXPECT_EQ(groups, (std::set<std::string>{"cc-nlp", "cc-vision"}));
  EXPECT_FALSE(all.contains("other_teams"));

  absl::StatusOr<std::string> mine = FetchHeadUsage("127.0.0.1", head_->port(), "vision-token-0123456789", since_,
                                                    until, "team");
  ASSERT_TRUE(mine.ok()) << mine.status();
  json vision = json::parse(*mine);
  ASSERT_EQ(vision["rows"].size(), 1u);
  EXPECT_EQ(vision["rows"][0]["group"], "vision");
  EXPECT_GT(vision["other_teams"]["gpu_hours"].get<double>(), 0) << "nlp's use, unnamed";
  // Both views price the same pool: the parts add up to the same capacity, to the cent.
  auto parts = [](const json& r) {
    int64_t cents = r["idle"]["cost_cents"].get<int64_t>() + r["unavailable"]["cost_cents"].get<int64_t>();
    for (const json& row : r["rows"]) cents += row["cost_cents"].get<int64_t>();
    if (r.contains("other_teams")) cents += r["other_teams"]["cost_cents"].get<int64_t>();
    return cents;
  };
  EXPECT_EQ(parts(all), all["capacity"]["cost_cents"].get<int64_t>());
  EXPECT_EQ(parts(vision), vision["capacity"]["cost_cents"].get<int64_t>());
}

// Unavailable time survives a restart of the head: a journal whose history says that one of the two
// H100s was not schedulable for half an hour, an hour ago (written by an earlier head), is read by
// a head started now, whose own memory knows nothing of that time; `usage` for that half hour
// reports the GPU-half-hour as unavailable, and the parts still add up to the capacity's cost.
TEST(HeadUsageHistory, UnavailableTimeSurvivesARestartOfTheHead) {
  const std::string path = ::testing::TempDir() + "/head-usage-history-" + std::to_string(::getpid()) + ".db";
  std::remove(path.c_str());
  const double t0 = std::floor(WallNow()) - 3600;
  {
    absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path);
    ASSERT_TRUE(journal.ok()) << journal.status();
    for (int i = 0; i < 30; ++i) {  // a sample a minute, as the head takes them
      const double t = t0 + 60 * i;
      (*journal)->RecordHistory({HistoryRow{.t_s = t, .scope = "pool", .capacity_gpus = 1},
                                 HistoryRow{.t_s = t, .scope = "model:H100-80GB", .capacity_gpus = 1},
                                 HistoryRow{.t_s = t, .scope = "vision", .capacity_gpus = 1}},
                                /*keep_after_s=*/0);
    }
    ASSERT_TRUE((*journal)->Flush().ok());
  }  // that head is gone
  PoolServiceOptions po;
  po.pool.simulate = "2xH100-80GB";
  po.config_text = kTwoTeams;
  PoolServerOptions so;
  so.operator_token = "ops-token-0123456789";
  so.journal_path = path;
  std::unique_ptr<PoolServer> head = StartHead(po, so);
  ASSERT_NE(head, nullptr);
  absl::StatusOr<std::string> text =
      FetchHeadUsage("127.0.0.1", head->port(), "ops-token-0123456789", t0, t0 + 1800, "team");
  ASSERT_TRUE(text.ok()) << text.status();
  json r = json::parse(*text);
  EXPECT_DOUBLE_EQ(r["capacity"]["gpu_hours"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(r["unavailable"]["gpu_hours"].get<double>(), 0.5) << "one of two GPUs, for the half hour";
  EXPECT_DOUBLE_EQ(r["idle"]["gpu_hours"].get<double>(), 0.5);
  EXPECT_EQ(r["unavailable"]["cost_cents"].get<int64_t>() + r["idle"]["cost_cents"].get<int64_t>(),
            r["capacity"]["cost_cents"].get<int64_t>());
  EXPECT_GT(r["unavailable"]["cost_cents"].get<int64_t>(), 0);
  head.reset();
  std::remove(path.c_str());
}

// The spare reserve as `gpupool status` and `queue` read it: the reserve with its spare GPUs, and
// a borrower that waits for it with the reason that says so.
constexpr char kReserved[] = R"(
priority_classes:
  - {name: urgent, value: 2000, preemptible: true, grace_period_s: 10}
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
teams:
  - name: vision
    quotas: [{gpus: H100-80GB, nominal: 1}]
  - name: nlp
    quotas: [{gpus: H100-80GB, nominal: 1}]
reserve:
  - {group: H100-80GB, gpus: 1, for_priority_at_least: urgent}
)";

TEST(HeadReserve, TheReportShowsTheReserveAndWhatWaitsForIt) {
  PoolServiceOptions po;
  po.pool.simulate = "3xH100-80GB";
  po.config_text = kReserved;
  PoolServerOptions so;
  so.team_tokens = {{"vision", "vision-token-0123456789"}};
  so.operator_token = "ops-token-0123456789";
  std::unique_ptr<PoolServer> head = StartHead(po, so);
  ASSERT_NE(head, nullptr);
  auto vision = RemotePool::Connect({.port = head->port(), .team = "vision", .token = "vision-token-0123456789"});
  ASSERT_TRUE(vision.ok()) << vision.status();
  Recorder first, second, third;
  ASSERT_TRUE((*vision)->Request(Req("v1"), &first).ok());
  ASSERT_TRUE(first.WaitFor("granted"));
  ASSERT_TRUE((*vision)->Request(Req("v2"), &second).ok());  // borrows nlp's idle GPU
  ASSERT_TRUE(second.WaitFor("granted"));
  ASSERT_TRUE((*vision)->Request(Req("v3"), &third).ok());  // only the reserve is left
  for (int i = 0; i < 200 && head->pool().pending_requests() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  absl::StatusOr<std::string> text = FetchHeadReport("127.0.0.1", head->port(), "ops-token-0123456789");
  ASSERT_TRUE(text.ok()) << text.status();
  json report = json::parse(*text);
  ASSERT_EQ(report["reserve"].size(), 1u);
  EXPECT_EQ(report["reserve"][0]["group"], "H100-80GB");
  EXPECT_EQ(report["reserve"][0]["gpus"], 1);
  EXPECT_EQ(report["reserve"][0]["for_priority_at_least"], "urgent");
  EXPECT_EQ(report["reserve"][0]["spare_gpus"], 1);
  EXPECT_EQ(report["reserve"][0]["group_gpus"], 3);
  ASSERT_EQ(report["pending"].size(), 1u);
  EXPECT_THAT(report["pending"][0]["request"].get<std::string>(), ::testing::EndsWith("/v3"));  // "<session>/v3"
  EXPECT_EQ(report["pending"][0]["reason"], "kept-for-reserve");
  vision->reset();
}

TEST(HeadReserve, AHeadWhoseQuotasLeaveNoRoomForTheReserveDoesNotStart) {
  PoolServiceOptions po;
  po.pool.simulate = "2xH100-80GB";  // nominal 1 + 1 leaves no GPU for a reserve of 1
  po.config_text = kReserved;
  absl::StatusOr<std::unique_ptr<PoolService>> pool = PoolService::Start(po);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(pool.status().message()),
              ::testing::HasSubstr("reserve[0].gpus: the teams' nominal quotas for 'H100-80GB' total 2 GPUs, more "
                                   "than its capacity minus the reserve (2 - 1 = 1)"));
}

}  // namespace
}  // namespace gpupool::runtime
