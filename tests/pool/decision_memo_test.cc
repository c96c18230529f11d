// The decision memo's invalidation table (decision_memo.h), event by event: each memory is kept
// through the events that cannot revive its search and forgotten on those that can.
#include "pool/scheduler/decision_memo.h"

#include <gtest/gtest.h>

namespace gpupool::pool {
namespace {

PlacementMemoKey Placement(uint32_t shape, std::string group = "h100") {
  return {.shape = ShapeId{shape}, .group = std::move(group)};
}

TEST(DecisionMemo, APlacementFailureHoldsWhileCapacityOnlyShrinksAndSaysSo) {
  DecisionMemo memo;
  EXPECT_EQ(memo.RecallPlacement(Placement(1)).recall, DecisionMemo::Recall::kUnknown);
  memo.RememberPlacementFailure(Placement(1), WaitReason::kFragmented);
  DecisionMemo::PlacementRecall r = memo.RecallPlacement(Placement(1));
  EXPECT_EQ(r.recall, DecisionMemo::Recall::kExact);
  EXPECT_EQ(r.reason, WaitReason::kFragmented);
  memo.StateChanged();  // a grant: capacity shrank
  r = memo.RecallPlacement(Placement(1));
  EXPECT_EQ(r.recall, DecisionMemo::Recall::kShrunk);
  EXPECT_EQ(r.reason, WaitReason::kFragmented);
  memo.RememberPlacementFailure(Placement(1), WaitReason::kNoFreeCapacity);  // diagnosed again
  EXPECT_EQ(memo.RecallPlacement(Placement(1)).recall, DecisionMemo::Recall::kExact);
  EXPECT_EQ(memo.RecallPlacement(Placement(1)).reason, WaitReason::kNoFreeCapacity);
  // Other keys are other searches.
  EXPECT_EQ(memo.RecallPlacement(Placement(2)).recall, DecisionMemo::Recall::kUnknown);
  EXPECT_EQ(memo.RecallPlacement(Placement(1, "a100")).recall, DecisionMemo::Recall::kUnknown);
  PlacementMemoKey across = Placement(1, "");
  across.across_groups = true;
  EXPECT_EQ(memo.RecallPlacement(across).recall, DecisionMemo::Recall::kUnknown);
  PlacementMemoKey backfilling = Placement(1);
  backfilling.backfill = {600};
  EXPECT_EQ(memo.RecallPlacement(backfilling).recall, DecisionMemo::Recall::kUnknown);
}

TEST(DecisionMemo, PlacementAndPreemptionFailuresGoWhenCapacityGrowsOrACycleStarts) {
  const PreemptionMemoKey preempt{.shape = ShapeId{3}, .group = "h100", .team = "vision", .priority = 200,
                                  .guaranteed = true};
  for (int event = 0; event < 2; ++event) {
    DecisionMemo memo;
    memo.RememberPlacementFailure(Placement(1), WaitReason::kNoFreeCapacity);
    memo.RememberPreemptionFailure(preempt);
    memo.StateChanged();
    memo.BorrowingAdmitted();
    memo.GangReservationDropped();
    EXPECT_NE(memo.RecallPlacement(Placement(1)).recall, DecisionMemo::Recall::kUnknown);
    EXPECT_TRUE(memo.PreemptionFailed(preempt));
    if (event == 0) {
      memo.CapacityGrew();
    } else {
      memo.StartCycle(100);
    }
    EXPECT_EQ(memo.RecallPlacement(Placement(1)).recall, DecisionMemo::Recall::kUnknown) << event;
    EXPECT_FALSE(memo.PreemptionFailed(preempt)) << event;
  }
  DecisionMemo memo;
  memo.RememberPreemptionFailure(preempt);
  PreemptionMemoKey other_team = preempt;
  other_team.team = "nlp";
  EXPECT_FALSE(memo.PreemptionFailed(other_team));
  PreemptionMemoKey more_own_quota = preempt;
  more_own_quota.own_quota_to_free = 1000;
  EXPECT_FALSE(memo.PreemptionFailed(more_own_quota));
}

TEST(DecisionMemo, AMoveFailureOutlivesCyclesUntilRoomIsFreedABorrowerAdmittedOrItsRetryTime) {
  const MoveMemoKey key{.shape = ShapeId{1}, .group = "h100", .team = "vision"};
  const auto remembered = [&](auto&& event) {
    DecisionMemo memo;
    memo.RememberMoveFailure(key, /*retry_at_s=*/1000);
    event(memo);
    return memo.MoveFailed(key, 500);
  };
  EXPECT_TRUE(remembered([](DecisionMemo& m) { m.StartCycle(500); }));
  EXPECT_TRUE(remembered([](DecisionMemo& m) { m.StateChanged(); }));
  EXPECT_FALSE(remembered([](DecisionMemo& m) { m.CapacityGrew(); }));
  EXPECT_FALSE(remembered([](DecisionMemo& m) { m.GangReservationDropped(); }));
  EXPECT_FALSE(remembered([](DecisionMemo& m) { m.BorrowingAdmitted(); }));
  DecisionMemo memo;
  memo.RememberMoveFailure(key, 1000);
  EXPECT_TRUE(memo.MoveFailed(key, 999));
  EXPECT_FALSE(memo.MoveFailed(key, 1000));  // the next lease is old enough to move now
  EXPECT_EQ(memo.NextMoveRetry(0), 1000);
  EXPECT_EQ(memo.NextMoveRetry(1000), std::nullopt);
  memo.StartCycle(1000);  // and the cycle that reaches it forgets it
  EXPECT_EQ(memo.NextMoveRetry(0), std::nullopt);
}

TEST(DecisionMemo, AFutileRefillHoldsOnlyWhileNothingChanged) {
  DecisionMemo memo;
  EXPECT_FALSE(memo.RefillFutile("h100"));
  memo.RememberFutileRefill("h100");
  EXPECT_TRUE(memo.RefillFutile("h100"));
  EXPECT_FALSE(memo.RefillFutile("a100"));
  memo.StartCycle(10);
  EXPECT_TRUE(memo.RefillFutile("h100"));
  memo.StateChanged();
  EXPECT_FALSE(memo.RefillFutile("h100"));
}

}  // namespace
}  // namespace gpupool::pool
