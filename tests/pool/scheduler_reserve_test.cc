// The spare reserve (the configuration's `reserve:`, pool/scheduler/spare_reserve.h) in the live
// scheduler: borrowers never take it, urgent work is placed from it at once, it refills by
// reclaiming borrowed work of lower classes only. Each behaviour under the default placement
// policy (the policy view's path) and under packing (the free-capacity index and the scan).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/scheduler.h"
#include "tests/pool/scheduler_pool.h"

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

// 8 H100 on two nodes; nominal quotas 3 + 3 = capacity minus the reserve of 2.
std::string ReservedPool(int reserve = 2) {
  return absl::StrCat(R"(
nodes:
  - name: n
    count: 2
    gpus: [{model: H100-80GB, count: 4}]
priority_classes:
  - {name: urgent, value: 2000, grace_period_s: 10}
  - {name: training, value: 500, grace_period_s: 120, checkpoint_interval_s: 600}
  - {name: experiment, value: 100, grace_period_s: 30}
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 3}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 3}]
reserve:
  - {group: H100-80GB, gpus: )", reserve, R"(, for_priority_at_least: urgent}
)");
}

constexpr const char* kPolicies[] = {"gpupool", "packing"};

int SpareNow(Pool& pool) { return pool.s().Reserves().at(0).spare_gpus; }

// Both teams at their nominal 3 with experiments, granted at time 0: the reserve's 2 GPUs spare.
void FillBothTeamsWithExperiments(Pool& pool) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.Submit(absl::StrCat("a", i), "a", 1, "experiment").ok());
    ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  }
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(6));
}

int GrantedFor(const CycleResult& r, Pool& pool, const std::string& request) {
  int n = 0;
  for (const std::string& id : r.granted) n += pool.s().leases().at(id).request.id == request;
  return n;
}

TEST(SpareReserve, BorrowersNeverTakeIt) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    Pool pool(ReservedPool(), {.placement_policy = policy});
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
    CycleResult r = pool.s().Schedule(0);
    EXPECT_THAT(r.granted, SizeIs(6));  // 3 within nominal, 3 borrowed: the reserve's 2 stay free
    EXPECT_EQ(SpareNow(pool), 2);
    EXPECT_EQ(pool.ReasonOf("b6"), WaitReason::kKeptForReserve);
    EXPECT_EQ(pool.ReasonOf("b7"), WaitReason::kKeptForReserve);
    // A later cycle changes nothing.
    r = pool.s().Schedule(10);
    EXPECT_TRUE(r.granted.empty());
    EXPECT_TRUE(r.revoked.empty());
  }
}

TEST(SpareReserve, AGangThatWouldTakeTheReserveWaitsForIt) {
  Pool pool(ReservedPool());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  pool.s().Schedule(0);
  // 4 GPUs free, 2 of them the reserve: a 3-GPU gang b would borrow would leave 1. (Within a
  // team's nominal quota it would reclaim borrowed work instead: see below.)
  ASSERT_TRUE(pool.Submit("gang", "b", 3, "experiment", 1).ok());
  CycleResult r = pool.s().Schedule(1);
  EXPECT_TRUE(r.granted.empty());
  EXPECT_EQ(pool.ReasonOf("gang"), WaitReason::kKeptForReserve);
  EXPECT_EQ(SpareNow(pool), 4);
}

TEST(SpareReserve, ARequestThatCouldNeverFitBesideTheReserveIsRefused) {
  Pool pool(ReservedPool());
  absl::StatusOr<std::string> id = pool.Submit("big", "a", 7, "training");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("beside the spare GPUs reserved"));
  EXPECT_TRUE(pool.Submit("fits", "a", 6, "training").ok());
  EXPECT_TRUE(pool.Submit("urgent-big", "a", 8, "urgent").ok());  // the reserve is its own
}

TEST(SpareReserve, UrgentWorkIsPlacedFromItAtOnceAndItRefillsByReclaimingBorrowedWork) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    Pool pool(ReservedPool(), {.placement_policy = policy});
    // b: 3 training within nominal, then 1 training and 2 experiments borrowed.
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("bt", i), "b", 1, "training").ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(3));
    ASSERT_TRUE(pool.Submit("bt3", "b", 1, "training", 1).ok());
    ASSERT_THAT(pool.s().Schedule(1).granted, SizeIs(1));
    ASSERT_TRUE(pool.Submit("be0", "b", 1, "experiment", 2).ok());
    ASSERT_TRUE(pool.Submit("be1", "b", 1, "experiment", 2).ok());
    ASSERT_THAT(pool.s().Schedule(2).granted, SizeIs(2));
    ASSERT_EQ(pool.s().ledger().Borrowed("b", "H100-80GB"), 3000);
    ASSERT_EQ(SpareNow(pool), 2);

    // Team a's urgent request: placed in the cycle it arrives, no grace period waited.
    ASSERT_TRUE(pool.Submit("fix", "a", 1, "urgent", 100).ok());
    CycleResult r = pool.s().Schedule(100);
    EXPECT_EQ(GrantedFor(r, pool, "fix"), 1);
    EXPECT_EQ(SpareNow(pool), 1);
    // The refill reclaims one borrowed lease, of the lowest class: an experiment.
    ASSERT_THAT(r.revoked, SizeIs(1));
    const Lease& victim = pool.s().leases().at(r.revoked[0].lease_id);
    EXPECT_EQ(victim.request.priority_class, "experiment");
    EXPECT_TRUE(victim.borrowing);
    EXPECT_EQ(r.revoked[0].cause, RevokeCause::kReclaim);
    EXPECT_EQ(r.revoked[0].for_request, "reserve:H100-80GB");
    EXPECT_EQ(r.revoked[0].deadline_s, 130);  // the experiment's grace period
    EXPECT_EQ(pool.s().Reserves().at(0).refilling_leases, 1);
    // The next cycle does not revoke again for the same shortfall.
    EXPECT_TRUE(pool.s().Schedule(101).revoked.empty());

    // The victim stops and asks again: the freed GPU is the reserve's, not the borrower's.
    const std::string victim_request = victim.request.id;
    ASSERT_TRUE(pool.s().Release(r.revoked[0].lease_id, 110).ok());
    ASSERT_TRUE(pool.Submit(victim_request + "-again", "b", 1, "experiment", 110).ok());
    r = pool.s().Schedule(110);
    EXPECT_TRUE(r.granted.empty());
    EXPECT_EQ(SpareNow(pool), 2);
    EXPECT_EQ(pool.ReasonOf(victim_request + "-again"), WaitReason::kKeptForReserve);
    EXPECT_EQ(pool.s().Reserves().at(0).refilling_leases, 0);
  }
}

TEST(SpareReserve, WithoutAReserveUrgentWorkWaitsForTheGracePeriod) {
  // The same pool and work with a reserve of 0: the baseline the reserve improves on.
  Pool pool(ReservedPool(0));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(8));
  ASSERT_TRUE(pool.Submit("fix", "a", 1, "urgent", 100).ok());
  CycleResult r = pool.s().Schedule(100);
  EXPECT_EQ(GrantedFor(r, pool, "fix"), 0);
  EXPECT_EQ(pool.ReasonOf("fix"), WaitReason::kWaitingForPreemption);
}

TEST(SpareReserve, WorkWithinNominalQuotaIsNeverPreemptedToRefillIt) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    Pool pool(ReservedPool(), {.placement_policy = policy});
    ASSERT_NO_FATAL_FAILURE(FillBothTeamsWithExperiments(pool));
    // Both teams at nominal: urgent work beyond it borrows the reserve (its class may borrow).
    ASSERT_TRUE(pool.Submit("fix-a", "a", 1, "urgent", 5).ok());
    CycleResult r = pool.s().Schedule(5);
    EXPECT_EQ(GrantedFor(r, pool, "fix-a"), 1);
    EXPECT_TRUE(r.revoked.empty());  // nothing borrowed below the class: no refill possible
    EXPECT_EQ(SpareNow(pool), 1);
    ASSERT_TRUE(pool.Submit("fix-b", "b", 1, "urgent", 6).ok());
    r = pool.s().Schedule(6);
    EXPECT_EQ(GrantedFor(r, pool, "fix-b"), 1);
    EXPECT_TRUE(r.revoked.empty());
    EXPECT_EQ(SpareNow(pool), 0);
    for (const auto& [id, lease] : pool.s().leases()) EXPECT_FALSE(lease.revoke_deadline_s.has_value()) << id;
  }
}

// A preemption for work below the class frees what that work needs, not the reserve's shortfall
// besides: the request may not take the reserve's spare GPUs, but it may take its victims'.
TEST(SpareReserve, APreemptionBesideAShortReserveRevokesOnlyWhatTheRequestNeeds) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    // b: 3 experiments within nominal and 2 urgent leases on the reserve; a: 2 of its 3.
    Pool pool(ReservedPool(), {.placement_policy = policy});
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("a", i), "a", 1, "training").ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(5));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("bu", i), "b", 1, "urgent", 1).ok());
    ASSERT_THAT(pool.s().Schedule(1).granted, SizeIs(2));
    ASSERT_EQ(SpareNow(pool), 1);
    // a's third GPU is owed within nominal: it reclaims one borrowed lease, not two.
    ASSERT_TRUE(pool.Submit("a2", "a", 1, "training", 10).ok());
    CycleResult r = pool.s().Schedule(10);
    EXPECT_THAT(r.revoked, SizeIs(1));
    EXPECT_EQ(SpareNow(pool), 1) << "the free GPU stays the reserve's";
  }
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    // The reserve all in use by urgent work; a at its nominal 3 with experiments. a's training
    // (borrowing) preempts one of its own experiments for its one GPU, not three.
    Pool pool(ReservedPool(), {.placement_policy = policy});
    ASSERT_NO_FATAL_FAILURE(FillBothTeamsWithExperiments(pool));
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("bu", i), "b", 1, "urgent", 1).ok());
    ASSERT_THAT(pool.s().Schedule(1).granted, SizeIs(2));
    ASSERT_EQ(SpareNow(pool), 0);
    ASSERT_TRUE(pool.Submit("at", "a", 1, "training", 10).ok());
    CycleResult r = pool.s().Schedule(10);
    ASSERT_THAT(r.revoked, SizeIs(1));
    EXPECT_EQ(pool.s().leases().at(r.revoked[0].lease_id).request.team, "a");
  }
}

// A lease granted as borrowing whose team has since fallen to its nominal quota is not borrowed
// any more: the refill leaves it alone.
TEST(SpareReserve, TheRefillTakesNoMoreThanATeamUsesBeyondItsQuotaNow) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    Pool pool(ReservedPool(), {.placement_policy = policy});
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(5));  // 3 within nominal, 2 borrowed
    // Two of the first three end: b now uses 3, its nominal, though two leases say "borrowing".
    ASSERT_TRUE(pool.s().Release(pool.LeaseOf("b0"), 5).ok());
    ASSERT_TRUE(pool.s().Release(pool.LeaseOf("b1"), 5).ok());
    ASSERT_TRUE(pool.Submit("fix0", "a", 1, "urgent", 6).ok());
    ASSERT_TRUE(pool.Submit("fix1", "a", 1, "urgent", 6).ok());
    ASSERT_TRUE(pool.Submit("fix2", "a", 1, "urgent", 6).ok());
    ASSERT_TRUE(pool.Submit("fix3", "a", 1, "urgent", 6).ok());
    ASSERT_TRUE(pool.Submit("fix4", "a", 1, "urgent", 6).ok());
    CycleResult r = pool.s().Schedule(6);
    EXPECT_EQ(SpareNow(pool), 0);
    EXPECT_TRUE(r.revoked.empty()) << "b's leases are within its nominal quota now";
  }
}

TEST(SpareReserve, GuaranteedWorkBelowTheClassReclaimsInsteadOfTakingIt) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    Pool pool(ReservedPool(), {.placement_policy = policy});
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(6));
    // a is within nominal: guaranteed, but the reserve is not for its class. It reclaims one of
    // b's borrowed GPUs with the grace period.
    ASSERT_TRUE(pool.Submit("a0", "a", 1, "training", 10).ok());
    CycleResult r = pool.s().Schedule(10);
    EXPECT_EQ(GrantedFor(r, pool, "a0"), 0);
    ASSERT_THAT(r.revoked, SizeIs(1));
    EXPECT_EQ(r.revoked[0].for_request, "a0");
    EXPECT_EQ(SpareNow(pool), 2);
    EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kWaitingForPreemption);
    r = pool.s().Schedule(40);  // the experiment's grace period is over
    EXPECT_EQ(GrantedFor(r, pool, "a0"), 1);
    EXPECT_EQ(SpareNow(pool), 2);
  }
}

TEST(SpareReserve, FractionsBesideItGoOnPartlyUsedGpus) {
  for (const char* policy : kPolicies) {
    SCOPED_TRACE(policy);
    Pool pool(ReservedPool(), {.placement_policy = policy});
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.Submit(absl::StrCat("b", i), "b", 1, "experiment").ok());
    LeaseRequest half;
    half.id = "half0";
    half.team = "b";  // borrowing: it cannot reclaim, so what it waits for is the reserve
    half.priority_class = "experiment";
    half.slot = SlotShape::Fraction(30 * 1024, 500);
    ASSERT_TRUE(pool.s().Submit(half, 0).ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(6));
    ASSERT_EQ(SpareNow(pool), 2);  // 5 whole + 1 half-used GPU of 8
    // A second half GPU must go beside the first, whatever the policy would prefer; a third
    // finds no room that leaves the reserve whole.
    half.id = "half1";
    ASSERT_TRUE(pool.s().Submit(half, 1).ok());
    half.id = "half2";
    ASSERT_TRUE(pool.s().Submit(half, 1).ok());
    CycleResult r = pool.s().Schedule(1);
    EXPECT_THAT(r.granted, SizeIs(1));
    EXPECT_EQ(SpareNow(pool), 2);
    EXPECT_EQ(pool.ReasonOf(r.granted.empty() || pool.s().leases().at(r.granted[0]).request.id == "half1" ? "half2"
                                                                                                     : "half1"),
              WaitReason::kKeptForReserve);
  }
}

TEST(SpareReserve, StatusShowsTheReserve) {
  Pool pool(ReservedPool());
  std::vector<ReserveStatus> reserves = pool.s().Reserves();
  ASSERT_THAT(reserves, SizeIs(1));
  EXPECT_EQ(reserves[0].group, "H100-80GB");
  EXPECT_EQ(reserves[0].gpus, 2);
  EXPECT_EQ(reserves[0].for_class, "urgent");
  EXPECT_EQ(reserves[0].spare_gpus, 8);
  EXPECT_EQ(reserves[0].group_gpus, 8);
  EXPECT_EQ(reserves[0].refilling_leases, 0);
}

}  // namespace
}  // namespace gpupool::pool
