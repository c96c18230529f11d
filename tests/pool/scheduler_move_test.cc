// Defragmentation: a guaranteed request whose room is scattered over partly used GPUs moves
// leases that fit elsewhere now (pool/scheduler/move_planner.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/scheduler.h"
#include "tests/pool/scheduler_pool.h"

namespace gpupool::pool {
namespace {

using ::testing::SizeIs;

// Two H100s; a's and b's nominal quotas are one each, so whatever b runs within its quota, a's
// whole GPU is guaranteed. c only borrows: the tests use it to steer where b's leases land.
constexpr char kTwoGpus[] = R"(
nodes:
  - {name: n, count: 1, gpus: [{model: H100-80GB, count: 2}]}
teams:
  - {name: a, quotas: [{gpus: H100-80GB, nominal: 1}]}
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 1}]}
  - {name: c, quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 2}]}
)";

constexpr int64_t kQuarterMib = 81559 / 4;  // an H100-80GB has 81559 MiB

LeaseRequest Fraction(const std::string& id, const std::string& team, int milli,
                      const std::string& cls = "experiment") {
  return {.id = id, .team = team, .priority_class = cls,
          .slot = SlotShape::Fraction(kQuarterMib * milli / 250, milli)};
}

// The GPU index a request's lease holds.
int GpuOf(Pool& pool, const std::string& request_id) {
  return pool.s().leases().at(pool.LeaseOf(request_id)).gpus.at(0).index;
}

// Leaves one quarter GPU of b on each GPU, "q0" on GPU 0 and "q4" on GPU 1, granted at time 0
// within b's nominal quota: both GPUs partly used, 1.5 GPUs free in total, no whole GPU free.
// (Packing would put q4 beside q0: c's quarters fill GPU 0 in between, then leave.)
void ScatterTwoQuarters(Pool& pool) {
  ASSERT_TRUE(pool.s().Submit(Fraction("q0", "b", 250), 0).ok());
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(pool.s().Submit(Fraction(absl::StrCat("c", i), "c", 250), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(4));
  ASSERT_TRUE(pool.s().Submit(Fraction("q4", "b", 250), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1));
  ASSERT_EQ(GpuOf(pool, "q0"), 0);
  ASSERT_EQ(GpuOf(pool, "q4"), 1);
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(pool.s().Release(pool.LeaseOf(absl::StrCat("c", i)), 0).ok());
}

TEST(SchedulerMove, AGuaranteedRequestMovesTheCheapestLeaseThatFitsElsewhere) {
  Pool pool(kTwoGpus);
  ScatterTwoQuarters(pool);
  // q0 saved its work a minute ago, q4 not since it started: moving q0 loses less.
  const std::string q0 = pool.LeaseOf("q0"), q4 = pool.LeaseOf("q4");
  ASSERT_TRUE(pool.s().RecordCheckpoint(q0, 940).ok());
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  EXPECT_TRUE(r.granted.empty());
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].lease_id, q0);
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kMove);
  EXPECT_EQ(r.revoked[0].for_request, "a0");
  EXPECT_EQ(r.revoked[0].deadline_s, 1000 + 30);  // the mover's grace period (experiment)
  EXPECT_DOUBLE_EQ(r.revoked[0].gpu_seconds_at_risk, 0.25 * 60);
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kWaitingForPreemption);

  // While q0 stops, the GPU it leaves is a0's: a new quarter of b's goes beside q4.
  ASSERT_TRUE(pool.s().Submit(Fraction("late", "b", 250), 1005).ok());
  r = pool.s().Schedule(1005);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(GpuOf(pool, "late"), 1);

  // q0 stops at its safe point; a0 gets GPU 0 and q0, asked again, the room left on GPU 1.
  ASSERT_TRUE(pool.s().Release(q0, 1010).ok());
  ASSERT_TRUE(pool.s().Submit(Fraction("q0-again", "b", 250), 1010).ok());
  r = pool.s().Schedule(1010);
  ASSERT_THAT(r.granted, SizeIs(2));
  EXPECT_EQ(GpuOf(pool, "a0"), 0);
  EXPECT_EQ(GpuOf(pool, "q0-again"), 1);
  EXPECT_TRUE(r.revoked.empty());
  EXPECT_EQ(pool.s().leases().at(pool.LeaseOf("a0")).guaranteed_wait_s, 10);
}

TEST(SchedulerMove, MovesNeverChaseEachOtherRound) {
  Pool pool(kTwoGpus);
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 1000).ok());
  int moves = 0;
  // Every revoked lease stops at once and asks again; many cycles, long enough for every lease
  // to become movable again.
  for (int64_t now = 1000; now < 1000 + 50 * 100; now += 100) {
    CycleResult r = pool.s().Schedule(now);
    for (const Revocation& v : r.revoked) {
      ++moves;
      EXPECT_EQ(v.cause, RevokeCause::kMove);
      const LeaseRequest moved = pool.s().leases().at(v.lease_id).request;
      ASSERT_TRUE(pool.s().Release(v.lease_id, now).ok());
      LeaseRequest again = moved;
      again.id = absl::StrCat(moved.id, "-again");
      ASSERT_TRUE(pool.s().Submit(again, now).ok());
    }
  }
  EXPECT_EQ(moves, 1);
  EXPECT_EQ(pool.s().pending_count(), 0u);
  EXPECT_EQ(pool.s().ledger().Usage("a", "H100-80GB"), 1000);
  EXPECT_EQ(pool.s().ledger().Usage("b", "H100-80GB"), 500);
}

TEST(SchedulerMove, AYoungLeaseIsNotMoved) {
  Pool pool(kTwoGpus, {.min_run_before_move_s = 600});
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 100).ok());
  CycleResult r = pool.s().Schedule(100);
  EXPECT_TRUE(r.revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
  r = pool.s().Schedule(600);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kMove);
}

TEST(SchedulerMove, OffItWaitsFragmented) {
  Pool pool(kTwoGpus, {.move_for_guarantees = false});
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 1000).ok());
  EXPECT_TRUE(pool.s().Schedule(1000).revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
}

TEST(SchedulerMove, NonPreemptibleLeasesStay) {
  Pool pool(kTwoGpus);
  // Two inference services of b, one on each GPU (c fills GPU 0 in between).
  ASSERT_TRUE(pool.s().Submit(Fraction("inf0", "b", 250, "production-inference"), 0).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.s().Submit(Fraction(absl::StrCat("c", i), "c", 250), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(4));
  ASSERT_TRUE(pool.s().Submit(Fraction("inf1", "b", 250, "production-inference"), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1));
  ASSERT_EQ(GpuOf(pool, "inf0"), 0);
  ASSERT_EQ(GpuOf(pool, "inf1"), 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.s().Release(pool.LeaseOf(absl::StrCat("c", i)), 0).ok());
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 1000).ok());
  EXPECT_TRUE(pool.s().Schedule(1000).revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
}

TEST(SchedulerMove, NothingMovesWhenTheMoverWouldHaveNowhereToGo) {
  // Three GPUs each 60% used by b: 1.2 GPUs free in total, a whole GPU nowhere, and none of b's
  // leases fits beside another.
  Pool pool(R"(
nodes:
  - {name: n, count: 1, gpus: [{model: H100-80GB, count: 3}]}
teams:
  - {name: a, quotas: [{gpus: H100-80GB, nominal: 1}]}
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 2}]}
)");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.s().Submit(Fraction(absl::StrCat("f", i), "b", 600), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(3));
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 1000).ok());
  EXPECT_TRUE(pool.s().Schedule(1000).revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
}

TEST(SchedulerMove, ARequestBeyondItsNominalQuotaMovesNothing) {
  Pool pool(R"(
nodes:
  - {name: n, count: 1, gpus: [{model: H100-80GB, count: 2}]}
teams:
  - {name: a, quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 1}]}
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 2}]}
  - {name: c, quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 2}]}
)");
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, 1000).ok());
  EXPECT_TRUE(pool.s().Schedule(1000).revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
}

TEST(SchedulerMove, AGangGetsANodeByMovingASingleBesideAnother) {
  // Two nodes of two GPUs, one single-GPU lease of b on each ("one-a", "one-b"). a's pair (same
  // node) needs a node to itself: one of them moves beside the other.
  Pool pool(R"(
nodes:
  - {name: n, count: 2, gpus: [{model: H100-80GB, count: 2}]}
teams:
  - {name: a, quotas: [{gpus: H100-80GB, nominal: 2}]}
  - {name: b, quotas: [{gpus: H100-80GB, nominal: 2}]}
  - {name: c, quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 1}]}
)");
  const auto node_of = [&](const std::string& id) { return pool.s().leases().at(pool.LeaseOf(id)).gpus[0].node; };
  // Packing would put one-b beside one-a: c holds that GPU meanwhile.
  for (const char* id : {"one-a", "c", "one-b"}) {
    ASSERT_TRUE(pool.s().Submit({.id = id, .team = id[0] == 'c' ? "c" : "b", .priority_class = "experiment"}, 0).ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1));
  }
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("c"), 0).ok());
  ASSERT_NE(node_of("one-a"), node_of("one-b"));
  const std::map<std::string, std::string> kept = {{"one-a", "one-b"}, {"one-b", "one-a"}};  // -> the other

  ASSERT_TRUE(pool.s().Submit({.id = "pair", .team = "a", .priority_class = "experiment", .slot_count = 2,
                               .topology = GangTopology::kSameNode}, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kMove);
  const std::string moved = pool.s().leases().at(r.revoked[0].lease_id).request.id;
  const std::string stays = kept.at(moved);
  ASSERT_TRUE(pool.s().Release(r.revoked[0].lease_id, 1010).ok());
  ASSERT_TRUE(pool.s().Submit({.id = moved + "-again", .team = "b", .priority_class = "experiment"}, 1010).ok());
  r = pool.s().Schedule(1010);
  ASSERT_THAT(r.granted, SizeIs(2));
  EXPECT_NE(node_of("pair"), node_of(stays));
  EXPECT_EQ(node_of(moved + "-again"), node_of(stays));
}

}  // namespace
}  // namespace gpupool::pool
