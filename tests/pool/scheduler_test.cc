#include "pool/scheduler/scheduler.h"

#include <gmock/gmock.h>
#include <algorithm>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "tests/pool/scheduler_pool.h"

namespace gpupool::pool {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kTwoTeams[] = R"(
nodes:
  - name: n
    count: 2
    gpus: [{model: H100-80GB, count: 4}]
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 4}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 4, borrowing_limit: 4}]
)";

TEST(Scheduler, IdleQuotaIsBorrowedAndReclaimedWithinTheGracePeriod) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  CycleResult r = pool.s().Schedule(0);
  EXPECT_THAT(r.granted, SizeIs(8));  // 4 within nominal, 4 borrowed from a
  EXPECT_EQ(pool.s().ledger().Borrowed("b", "H100-80GB"), 4000);

  ASSERT_TRUE(pool.Submit("a0", "a", 2, "training", 100).ok());
  r = pool.s().Schedule(100);
  EXPECT_TRUE(r.granted.empty());
  ASSERT_THAT(r.revoked, SizeIs(2));
  for (const Revocation& v : r.revoked) {
    EXPECT_EQ(v.cause, RevokeCause::kReclaim);
    EXPECT_EQ(v.for_request, "a0");
    EXPECT_EQ(v.deadline_s, 100 + 30);  // experiment's grace period
    EXPECT_TRUE(pool.s().leases().at(v.lease_id).borrowing);
  }
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kWaitingForPreemption);

  // The victims do not stop by themselves: at the deadline they are stopped and a0 runs.
  r = pool.s().Schedule(129);
  EXPECT_TRUE(r.granted.empty());
  r = pool.s().Schedule(130);
  EXPECT_THAT(r.expired, SizeIs(2));
  EXPECT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().ledger().Usage("a", "H100-80GB"), 2000);
}

TEST(Scheduler, AVictimThatStopsEarlyHandsItsGpusToTheReclaimerOnly) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  pool.s().Schedule(0);
  ASSERT_TRUE(pool.Submit("a0", "a", 1).ok());
  CycleResult r = pool.s().Schedule(10);
  ASSERT_THAT(r.revoked, SizeIs(1));
  // b asks again at a higher priority before the victim stops; the freed GPU is reserved for a0.
  ASSERT_TRUE(pool.Submit("b-urgent", "b", 1, "production-inference", 11).ok());
  ASSERT_TRUE(pool.s().Release(r.revoked[0].lease_id, 12).ok());
  r = pool.s().Schedule(12);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).request.id, "a0");
}

// Regression: a borrower ordered ahead (here by priority) took the last idle GPU of a team's
// nominal quota and was reclaimed by that team's guaranteed request in the same cycle: a
// preemption for nothing. Guaranteed requests are now considered first, as Kueue orders them.
TEST(Scheduler, GuaranteedRequestsGoBeforeBorrowersSoNoneIsAdmittedOnlyToBeReclaimed) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "training").ok());
  EXPECT_THAT(pool.s().Schedule(0).granted, SizeIs(4));  // b at its nominal quota
  ASSERT_TRUE(pool.Submit("b-train", "b", 1, "training", 10).ok());  // would borrow, higher priority
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("a", i), "a", 1, "experiment", 10).ok());
  CycleResult r = pool.s().Schedule(10);
  EXPECT_TRUE(r.revoked.empty());
  EXPECT_THAT(r.granted, SizeIs(4));
  for (const std::string& id : r.granted) EXPECT_EQ(pool.s().leases().at(id).request.team, "a");
  EXPECT_EQ(pool.ReasonOf("b-train"), WaitReason::kNoBorrowableCapacity);
}

// Regression: every request of a team that reclaimed in one cycle checked "within nominal"
// against the team's leases alone, so together they reclaimed more than the nominal quota, were
// admitted as borrowers and were reclaimed in turn by the teams they had just reclaimed from.
TEST(Scheduler, ReclaimersWaitingForVictimsCountAgainstTheirTeamsNominalQuota) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  EXPECT_THAT(pool.s().Schedule(0).granted, SizeIs(8));  // 4 of them borrowed from a
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("a", i), "a", 1, "experiment", 10).ok());
  CycleResult r = pool.s().Schedule(10);
  EXPECT_THAT(r.revoked, SizeIs(4));  // a's nominal quota, not 6
  int waiting_for_victims = 0;
  for (const PendingInfo& p : pool.s().Pending()) {
    waiting_for_victims += p.reason == WaitReason::kWaitingForPreemption;
  }
  EXPECT_EQ(waiting_for_victims, 4);
  for (const Revocation& v : r.revoked) ASSERT_TRUE(pool.s().Release(v.lease_id, 20).ok());
  r = pool.s().Schedule(20);
  ASSERT_THAT(r.granted, SizeIs(4));
  for (const std::string& id : r.granted) EXPECT_FALSE(pool.s().leases().at(id).borrowing) << id;
  EXPECT_TRUE(r.revoked.empty());
}

TEST(Scheduler, NoPreemptionLoop) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  pool.s().Schedule(0);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("a", i), "a", 1, "experiment", 1).ok());
  int revocations = 0;
  int64_t now = 1;
  // b keeps resubmitting every request it loses; a keeps its guaranteed quota. Run many cycles.
  for (int cycle = 0; cycle < 50; ++cycle, now += 40) {
    CycleResult r = pool.s().Schedule(now);
    for (const Revocation& v : r.revoked) {
      ++revocations;
      EXPECT_EQ(pool.s().leases().at(v.lease_id).request.team, "b");
    }
    for (const std::string& id : r.expired) {
      ASSERT_TRUE(pool.Submit(absl::StrCat(id, "-again"), "b", 1, "experiment", now).ok());
    }
  }
  EXPECT_EQ(revocations, 4);  // exactly what a needed, once
  EXPECT_EQ(pool.s().ledger().Usage("a", "H100-80GB"), 4000);
  EXPECT_EQ(pool.s().ledger().Usage("b", "H100-80GB"), 4000);
  for (const PendingInfo& p : pool.s().Pending()) {
    EXPECT_NE(p.reason, WaitReason::kWaitingForPreemption) << p.request_id;
  }
}

TEST(Scheduler, NonPreemptibleClassNeverBorrowsAndIsNeverRevoked) {
  Pool pool(kTwoTeams);
  absl::StatusOr<std::string> too_big = pool.Submit("inf-big", "a", 5, "production-inference");
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("never borrows"));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("inf", i), "a", 1, "production-inference").ok());
  CycleResult r = pool.s().Schedule(0);
  EXPECT_THAT(r.granted, SizeIs(4));
  EXPECT_EQ(pool.ReasonOf("inf4"), WaitReason::kOverQuota);
  // Higher priority work of the same team cannot push inference out.
  ASSERT_TRUE(pool.s().Submit(LeaseRequest{.id = "urgent", .team = "a", .priority_class = "production-inference"}, 1).ok());
  r = pool.s().Schedule(1);
  EXPECT_TRUE(r.revoked.empty());
}

TEST(Scheduler, LowerPriorityOfTheSameTeamIsPreemptedChoosingTheLeastLostWork) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("exp", i), "a", 1, "experiment").ok());
  pool.s().Schedule(0);
  // b fills the rest, within its own nominal quota: a may not reclaim it.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  pool.s().Schedule(0);
  // exp2 checkpointed most recently: preempting it loses the least work.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.s().RecordCheckpoint(pool.LeaseOf(absl::StrCat("exp", i)), 100 + i * (i == 2 ? 300 : 10)).ok());
  ASSERT_TRUE(pool.Submit("train", "a", 1, "training", 700).ok());
  CycleResult r = pool.s().Schedule(700);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kPriority);
  EXPECT_EQ(pool.s().leases().at(r.revoked[0].lease_id).request.id, "exp2");
  EXPECT_DOUBLE_EQ(r.revoked[0].gpu_seconds_at_risk, 700 - 700);
}

TEST(Scheduler, BorrowingLimitAndEmptyCohortAreDistinctReasons) {
  Pool pool(kTwoTeams);
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  pool.s().Schedule(0);
  EXPECT_EQ(pool.ReasonOf("b8"), WaitReason::kOverQuota);  // nominal 4 + borrowing limit 4
  Pool other(kTwoTeams);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(other.Submit(absl::StrCat("a", i), "a", 1).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(other.Submit(absl::StrCat("b", i), "b", 1).ok());
  other.s().Schedule(0);
  EXPECT_EQ(other.ReasonOf("b4"), WaitReason::kNoBorrowableCapacity);
}

constexpr char kOpenPool[] = R"(
nodes:
  - name: n
    count: 2
    gpus: [{model: H100-80GB, count: 4}, {model: L4, count: 1, labels: {tier: inference}}]
)";

TEST(Scheduler, GangsAreAllOrNothingByTopology) {
  Pool pool(kOpenPool);
  LeaseRequest one{.id = "one", .team = "t", .allowed_models = {"H100-80GB"}};
  ASSERT_TRUE(pool.s().Submit(one, 0).ok());
  LeaseRequest other = one;
  other.id = "two";
  ASSERT_TRUE(pool.s().Submit(other, 0).ok());
  pool.s().Schedule(0);
  // Both singles packed onto one node, leaving the other node's 4 H100s whole for a gang.
  const auto& leases = pool.s().leases();
  ASSERT_THAT(leases, SizeIs(2));
  EXPECT_EQ(leases.begin()->second.gpus[0].node, std::next(leases.begin())->second.gpus[0].node);

  LeaseRequest gang{.id = "gang", .team = "t", .slot_count = 4, .allowed_models = {"H100-80GB"},
                    .topology = GangTopology::kSameNvLinkIsland};
  ASSERT_TRUE(pool.s().Submit(gang, 1).ok());
  CycleResult r = pool.s().Schedule(1);
  ASSERT_THAT(r.granted, SizeIs(1));
  const Lease& g = pool.s().leases().at(r.granted[0]);
  for (const GpuRef& ref : g.gpus) EXPECT_EQ(ref.node, g.gpus[0].node);

  LeaseRequest second_gang = gang;
  second_gang.id = "gang2";
  second_gang.topology = GangTopology::kSameNode;
  ASSERT_TRUE(pool.s().Submit(second_gang, 2).ok());
  r = pool.s().Schedule(2);
  EXPECT_TRUE(r.granted.empty());
  EXPECT_EQ(pool.ReasonOf("gang2"), WaitReason::kNoFreeCapacity);  // only 2 H100s free
  EXPECT_TRUE(pool.s().Cancel("gang2").ok());
}

// kOpenPool with one H100 free on each node: three singles on one node, a same-node triple on
// the other (placed there explicitly: the layout, not a policy's choice, is what is tested).
void LeaveOneH100FreePerNode(Pool& pool) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Place({.id = absl::StrCat("s", i), .team = "t", .allowed_models = {"H100-80GB"}},
                           {{"n-0", i}}).ok());
  }
  ASSERT_TRUE(pool.Place({.id = "triple", .team = "t", .slot_count = 3, .allowed_models = {"H100-80GB"},
                          .topology = GangTopology::kSameNode},
                         {{"n-1", 0}, {"n-1", 1}, {"n-1", 2}}).ok());
}

TEST(Scheduler, FreeCapacityInTheWrongPlacesIsReportedAsFragmented) {
  Pool pool(kOpenPool);
  LeaveOneH100FreePerNode(pool);
  ASSERT_TRUE(pool.s().Submit({.id = "pair", .team = "t", .slot_count = 2, .allowed_models = {"H100-80GB"},
                               .topology = GangTopology::kSameNode}, 1).ok());
  EXPECT_TRUE(pool.s().Schedule(1).granted.empty());
  EXPECT_EQ(pool.ReasonOf("pair"), WaitReason::kFragmented);
  // The same pair with no topology constraint runs: it backfills the pair's reservation because
  // it ends long before the singles (no estimate: an hour by default) free a node.
  ASSERT_TRUE(pool.s().Submit({.id = "loose", .team = "t", .slot_count = 2, .allowed_models = {"H100-80GB"},
                               .runtime_estimate_s = 600}, 2).ok());
  EXPECT_THAT(pool.s().Schedule(2).granted, SizeIs(1));
}

// Regression: a request that hit the placement-failure memo was given the reason remembered
// for an earlier request of its shape, even when a grant in between had changed it.
TEST(Scheduler, AWaitReasonFromThePlacementMemoIsDiagnosedAgainAfterAGrant) {
  Pool pool(kOpenPool);
  LeaveOneH100FreePerNode(pool);
  // In one cycle: a pair fails (fragmented) and reserves one node's free GPU, a single takes the
  // other, and a second pair of the same shape now lacks room altogether.
  LeaseRequest pair{.id = "pair-1", .team = "t", .slot_count = 2, .allowed_models = {"H100-80GB"},
                    .topology = GangTopology::kSameNode};
  ASSERT_TRUE(pool.s().Submit(pair, 1).ok());
  ASSERT_TRUE(pool.s().Submit({.id = "single", .team = "t", .allowed_models = {"H100-80GB"}}, 1).ok());
  pair.id = "pair-2";
  ASSERT_TRUE(pool.s().Submit(pair, 1).ok());
  EXPECT_THAT(pool.s().Schedule(1).granted, SizeIs(1));
  EXPECT_EQ(pool.ReasonOf("pair-1"), WaitReason::kFragmented);
  EXPECT_EQ(pool.ReasonOf("pair-2"), WaitReason::kNoFreeCapacity);
}

TEST(Scheduler, RequestsThatCanNeverRunAreRefusedAtSubmission) {
  Pool pool(kOpenPool);
  auto code = [&](LeaseRequest r) { return pool.s().Submit(std::move(r), 0).status(); };
  EXPECT_THAT(std::string(code({.id = "x", .team = "t", .slot_count = 5, .allowed_models = {"H100-80GB"},
                                .topology = GangTopology::kSameNode}).message()),
              HasSubstr("does not fit even in the empty pool"));
  EXPECT_THAT(std::string(code({.id = "x", .team = "t", .allowed_models = {"A100-80GB"}}).message()),
              HasSubstr("matches no GPU"));
  EXPECT_THAT(std::string(code({.id = "x", .team = "t", .required_labels = {{"tier", "training"}}}).message()),
              HasSubstr("matches no GPU"));
  EXPECT_EQ(code({.id = "x", .team = "t", .slot_count = 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(code({.id = "x", .team = "t", .priority_class = "vip"}).message()),
              HasSubstr("unknown priority class 'vip'"));
  EXPECT_EQ(code({.id = "x", .team = "t", .slot = SlotShape::Mig("1g.10gb")}).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(code({.id = "x", .team = "t", .slot = SlotShape::Fraction(1024, 100),
                                .hardware_isolation = true}).message()),
              HasSubstr("hardware isolation"));
  Pool teams(kTwoTeams);
  EXPECT_THAT(std::string(teams.Submit("x", "nobody", 1).status().message()), HasSubstr("unknown team 'nobody'"));
  Pool big(R"(
nodes:
  - {count: 3, gpus: [{model: H100-80GB, count: 4}]}
teams:
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 4, borrowing_limit: 4}]}
)");
  EXPECT_THAT(std::string(big.Submit("x", "b", 9).status().message()), HasSubstr("more than team 'b' may ever hold"));
}

TEST(Scheduler, FractionsPackOntoPartlyUsedGpus) {
  Pool pool(kOpenPool);
  for (int i = 0; i < 4; ++i) {
    LeaseRequest r{.id = absl::StrCat("f", i), .team = "t", .slot = SlotShape::Fraction(16000, 250),
                   .allowed_models = {"H100-80GB"}};
    ASSERT_TRUE(pool.s().Submit(r, 0).ok());
  }
  pool.s().Schedule(0);
  std::set<std::pair<std::string, int>> gpus;
  for (const auto& [id, lease] : pool.s().leases()) gpus.insert({lease.gpus[0].node, lease.gpus[0].index});
  EXPECT_THAT(gpus, SizeIs(1));  // four quarter-GPUs share one GPU
}

TEST(Scheduler, HealthDrainsRevokeWithGraceAndLostGpusReleaseAtOnce) {
  Pool pool(kOpenPool);
  LeaseRequest r{.id = "r", .team = "t", .slot_count = 2, .allowed_models = {"L4"}};
  ASSERT_TRUE(pool.s().Submit(r, 0).ok());
  pool.s().Schedule(0);
  const Lease lease = pool.s().leases().begin()->second;
  CycleResult drained = pool.s().SetGpuHealth(lease.gpus[0], HealthState::kDraining, 10);
  ASSERT_THAT(drained.revoked, SizeIs(1));
  EXPECT_EQ(drained.revoked[0].cause, RevokeCause::kDrain);
  EXPECT_EQ(drained.revoked[0].deadline_s, 10 + 120);
  CycleResult lost = pool.s().SetGpuHealth(lease.gpus[1], HealthState::kLost, 11);
  EXPECT_THAT(lost.expired, ElementsAre(lease.id));
  // No new work lands on the unhealthy L4s: it waits, and says why.
  LeaseRequest again{.id = "again", .team = "t", .allowed_models = {"L4"}};
  ASSERT_TRUE(pool.s().Submit(again, 12).ok());
  EXPECT_TRUE(pool.s().Schedule(12).granted.empty());
  EXPECT_EQ(pool.ReasonOf("again"), WaitReason::kUnhealthyCapacity);
  pool.s().SetGpuHealth(lease.gpus[1], HealthState::kHealthy, 13);
  EXPECT_THAT(pool.s().Schedule(13).granted, SizeIs(1));
}

TEST(Scheduler, FairShareOrdersEqualPriorityAndAgeingPreventsStarvation) {
  // An open pool: no request is within a nominal quota, so the order is share and age alone.
  // (With quotas, guaranteed requests go first and a borrower overtaking them would only be
  // reclaimed at once.)
  constexpr char kShares[] = R"(
nodes:
  - gpus: [{model: T4, count: 2}]
)";
  Pool pool(kShares);
  ASSERT_TRUE(pool.Submit("heavy-run", "heavy", 1, "experiment").ok());
  pool.s().Schedule(0);
  // One GPU left; heavy asked first, but light holds less of its share.
  ASSERT_TRUE(pool.Submit("heavy-2", "heavy", 1, "experiment", 1).ok());
  ASSERT_TRUE(pool.Submit("light-1", "light", 1, "experiment", 2).ok());
  CycleResult r = pool.s().Schedule(2);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).request.id, "light-1");
  // light now keeps submitting; heavy-2 has waited long enough to go first.
  ASSERT_TRUE(pool.s().Release(r.granted[0], 7200).ok());
  ASSERT_TRUE(pool.Submit("light-2", "light", 1, "experiment", 7200).ok());
  r = pool.s().Schedule(7200);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).request.id, "heavy-2");
}

TEST(Scheduler, SameEventsGiveTheSameDecisions) {
  auto run = [] {
    Pool pool(kTwoTeams);
    std::vector<std::string> log;
    int64_t now = 0;
    for (int round = 0; round < 20; ++round, now += 15) {
      std::string team = round % 3 == 0 ? "a" : "b";
      (void)pool.Submit(absl::StrCat("r", round), team, 1 + round % 3, round % 2 ? "experiment" : "training", now);
      CycleResult r = pool.s().Schedule(now);
      for (const auto& g : r.granted) log.push_back("grant " + g);
      for (const auto& v : r.revoked) log.push_back("revoke " + v.lease_id);
      for (const auto& e : r.expired) log.push_back("expire " + e);
    }
    return log;
  };
  std::vector<std::string> first = run();
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first, run());
}

}  // namespace
}  // namespace gpupool::pool

namespace gpupool::pool {
namespace {

TEST(Scheduler, HeadOfLineGangGetsAReservationAndOnlyShortWorkBackfills) {
  Pool pool(R"(
nodes:
  - {name: n, count: 2, gpus: [{model: A100-80GB, count: 4}]}
)");
  auto submit = [&](LeaseRequest r, int64_t now) { ASSERT_TRUE(pool.s().Submit(std::move(r), now).ok()); };
  submit({.id = "full", .team = "t", .slot_count = 4, .topology = GangTopology::kSameNode,
          .runtime_estimate_s = 1000}, 0);
  submit({.id = "short-lived", .team = "t", .runtime_estimate_s = 100}, 0);
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(2));

  submit({.id = "gang", .team = "t", .slot_count = 4, .topology = GangTopology::kSameNode}, 10);
  EXPECT_TRUE(pool.s().Schedule(10).granted.empty());
  std::vector<PendingInfo> pending = pool.s().Pending();
  ASSERT_THAT(pending, SizeIs(1));
  EXPECT_EQ(pending[0].reserved_start_s, 100);  // when short-lived is expected to end

  // Work with no estimate could run forever: it may not use the reserved GPUs.
  submit({.id = "open-ended", .team = "t"}, 20);
  // Work that ends before the gang's start backfills.
  submit({.id = "quick", .team = "t", .runtime_estimate_s = 50}, 20);
  submit({.id = "too-long", .team = "t", .runtime_estimate_s = 500}, 20);
  CycleResult r = pool.s().Schedule(20);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).request.id, "quick");
  EXPECT_EQ(pool.ReasonOf("open-ended"), WaitReason::kGangReservation);
  EXPECT_EQ(pool.ReasonOf("too-long"), WaitReason::kGangReservation);

  ASSERT_TRUE(pool.s().Release(r.granted[0], 70).ok());
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("short-lived"), 100).ok());
  r = pool.s().Schedule(100);
  ASSERT_FALSE(r.granted.empty());
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).request.id, "gang");  // not delayed
}

}  // namespace
}  // namespace gpupool::pool

namespace gpupool::pool {
namespace {

// A restarted head takes its previous run's leases back: they hold their GPUs and quota again,
// and what no longer fits is refused by name without changing anything.
TEST(SchedulerAdopt, AnAdoptedLeaseHoldsItsGpusAndQuotaUntilReleased) {
  // Granted by a first scheduler, adopted by a second one over the same pool (the restart).
  Pool before(kTwoTeams);
  ASSERT_TRUE(before.Submit("train", "a", 4).ok());
  ASSERT_THAT(before.s().Schedule(0).granted, SizeIs(1));
  const Lease held = before.s().leases().begin()->second;

  Pool after(kTwoTeams);
  ASSERT_TRUE(after.s().Adopt(held, 7).ok());
  ASSERT_EQ(after.s().leases().count(held.id), 1u);
  const Lease& adopted = after.s().leases().at(held.id);
  EXPECT_EQ(adopted.gpus, held.gpus);
  EXPECT_EQ(adopted.milli, 4000);
  EXPECT_EQ(adopted.started_s, 7);
  EXPECT_EQ(after.s().ledger().Usage("a", "H100-80GB"), 4000);
  EXPECT_EQ(after.s().Adopt(held, 7).code(), absl::StatusCode::kAlreadyExists);

  // Its GPUs are taken: b's 8-GPU gang waits, its 4-GPU request lands on the other GPUs.
  ASSERT_TRUE(after.Submit("b-all", "b", 8).ok());
  ASSERT_TRUE(after.Submit("b-half", "b", 4).ok());
  CycleResult r = after.s().Schedule(8);
  ASSERT_THAT(r.granted, SizeIs(1));
  for (const GpuRef& g : after.s().leases().at(r.granted[0]).gpus) {
    EXPECT_EQ(std::count(held.gpus.begin(), held.gpus.end(), g), 0) << g.node << "/" << g.index;
  }
  // A new lease id never repeats an adopted one.
  EXPECT_NE(r.granted[0], held.id);

  ASSERT_TRUE(after.s().Release(held.id, 9).ok());
  EXPECT_EQ(after.s().ledger().Usage("a", "H100-80GB"), 0);
}

// A request queued again after a restart keeps its place: it counts as submitted when it was
// first, so it goes before an equal request submitted (here: to this scheduler) ahead of it.
TEST(SchedulerAdopt, ARequeuedRequestKeepsItsAgeAndGoesBeforeNewerEquals) {
  Pool pool(kTwoTeams);
  ASSERT_TRUE(pool.Submit("a-all", "a", 4).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(5));

  ASSERT_TRUE(pool.Submit("new", "b", 1, "training", 100).ok());
  LeaseRequest old;
  old.id = "old";
  old.team = "b";
  old.priority_class = "training";
  old.slot_count = 1;
  ASSERT_TRUE(pool.s().Resubmit(old, 100, -5000).ok());
  EXPECT_THAT(pool.s().Schedule(100).granted, SizeIs(0));
  std::vector<PendingInfo> pending = pool.s().Pending();
  ASSERT_THAT(pending, SizeIs(2));
  EXPECT_EQ(pending[0].request_id, "old");
  EXPECT_EQ(pending[0].submitted_s, -5000);

  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("b0"), 101).ok());
  CycleResult r = pool.s().Schedule(101);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).request.id, "old");
  // A submission time in the future is today.
  LeaseRequest later = old;
  later.id = "later";
  ASSERT_TRUE(pool.s().Resubmit(later, 102, 9999).ok());
  for (const PendingInfo& p : pool.s().Pending()) {
    if (p.request_id == "later") EXPECT_EQ(p.submitted_s, 102);
  }
}

TEST(SchedulerAdopt, WhatNoLongerFitsIsRefusedByNameAndChangesNothing) {
  Pool before(kTwoTeams);
  ASSERT_TRUE(before.Submit("x", "a", 1).ok());
  ASSERT_TRUE(before.Submit("y", "b", 1).ok());
  ASSERT_THAT(before.s().Schedule(0).granted, SizeIs(2));
  Lease x = before.s().leases().at(before.LeaseOf("x"));
  Lease y = before.s().leases().at(before.LeaseOf("y"));

  Pool after(kTwoTeams);
  Lease elsewhere = x;
  elsewhere.gpus = {GpuRef{"n-9", 0}};
  absl::Status st = after.s().Adopt(elsewhere, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("n-9/0 is not in this pool"));
  Lease unknown_team = x;
  unknown_team.request.team = "zeta";
  EXPECT_THAT(after.s().Adopt(unknown_team, 0).message(), HasSubstr("unknown team 'zeta'"));

  ASSERT_TRUE(after.s().Adopt(x, 0).ok());
  Lease overlapping = y;
  overlapping.gpus = x.gpus;  // a whole GPU someone already holds
  st = after.s().Adopt(overlapping, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("has no room"));
  EXPECT_EQ(after.s().leases().size(), 1u);
  EXPECT_EQ(after.s().ledger().Usage("b", "H100-80GB"), 0);
  EXPECT_TRUE(after.s().Adopt(y, 0).ok()) << "the refusal left y's own GPU free";
}

}  // namespace
}  // namespace gpupool::pool
