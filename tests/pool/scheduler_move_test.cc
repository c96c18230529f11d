// Defragmentation: a guaranteed request whose room is scattered over partly used GPUs moves
// leases that fit elsewhere now (pool/scheduler/move_planner.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/scheduler.h"
#include "tests/pool/scheduler_pool.h"

namespace gpupool::pool {
namespace {

using ::testing::SizeIs;

// YAML for `nodes` nodes of `gpus` H100s each, and teams given as {name, "nominal: N[, ...]"}
// for the H100-80GB group.
std::string H100Pool(int nodes, int gpus,
                     const std::vector<std::pair<std::string, std::string>>& teams) {
  std::string yaml = absl::StrCat("nodes:\n  - {name: n, count: ", nodes,
                                  ", gpus: [{model: H100-80GB, count: ", gpus, "}]}\nteams:\n");
  for (const auto& [name, quota] : teams) {
    absl::StrAppend(&yaml, "  - {name: ", name, ", quotas: [{gpus: H100-80GB, ", quota, "}]}\n");
  }
  return yaml;
}

// Two H100s; a's and b's nominal quotas are one each, so whatever b runs within its quota, a's
// whole GPU is guaranteed. c only borrows: the tests use it to steer where b's leases land.
const std::string kTwoGpus = H100Pool(
    1, 2, {{"a", "nominal: 1"}, {"b", "nominal: 1"}, {"c", "nominal: 0, borrowing_limit: 2"}});

constexpr int64_t kQuarterMib = 81559 / 4;  // an H100-80GB has 81559 MiB

LeaseRequest Fraction(const std::string& id, const std::string& team, int milli,
                      const std::string& cls = "experiment") {
  return {.id = id,
          .team = team,
          .priority_class = cls,
          .slot = SlotShape::Fraction(kQuarterMib * milli / 250, milli)};
}

// a asks for a whole GPU, as an experiment, at `at`.
absl::StatusOr<std::string> SubmitA0(Pool& pool, int64_t at) {
  return pool.s().Submit({.id = "a0", .team = "a", .priority_class = "experiment"}, at);
}

// The cycle at `at` revokes nothing, and a0 waits with its room scattered.
void ExpectA0WaitsFragmented(Pool& pool, int64_t at) {
  EXPECT_TRUE(pool.s().Schedule(at).revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
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
  for (int i = 1; i < 4; ++i)
    ASSERT_TRUE(pool.s().Submit(Fraction(absl::StrCat("c", i), "c", 250), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(4));
  ASSERT_TRUE(pool.s().Submit(Fraction("q4", "b", 250), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1));
  ASSERT_EQ(GpuOf(pool, "q0"), 0);
  ASSERT_EQ(GpuOf(pool, "q4"), 1);
  for (int i = 1; i < 4; ++i)
    ASSERT_TRUE(pool.s().Release(pool.LeaseOf(absl::StrCat("c", i)), 0).ok());
}

TEST(SchedulerMove, AGuaranteedRequestMovesTheCheapestLeaseThatFitsElsewhere) {
  Pool pool(kTwoGpus);
  ScatterTwoQuarters(pool);
  // q0 saved its work a minute ago, q4 not since it started: moving q0 loses less.
  const std::string q0 = pool.LeaseOf("q0"), q4 = pool.LeaseOf("q4");
  ASSERT_TRUE(pool.s().RecordCheckpoint(q0, 940).ok());
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
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

// Three GPUs: 0.75 of non-preemptible inference of b on one ("inf"), a quarter of b alone on each
// of the others ("q0", "q1"), granted at time 0. 1.75 GPUs free, no whole GPU free, and the only
// room a moved quarter can go to is the quarter beside "inf". a and d each hold a nominal GPU;
// b never borrows.
const std::string kThreeGpus = H100Pool(1, 3,
                                        {{"a", "nominal: 1"},
                                         {"d", "nominal: 1"},
                                         {"b", "nominal: 1.25, borrowing_limit: 0"},
                                         {"c", "nominal: 0, borrowing_limit: 3"}});

// Grants `ids` one at a time, each alone in its cycle, at time 0.
void GrantInTurn(Pool& pool, const std::vector<LeaseRequest>& requests) {
  for (const LeaseRequest& r : requests) {
    ASSERT_TRUE(pool.s().Submit(r, 0).ok()) << r.id;
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1)) << r.id;
  }
}

// Returns the GPU of "inf", the one GPU with room for a moved quarter: inf (0.75) on GPU 0, b's
// quarters q0 and q1 alone on GPUs 1 and 2, placed there explicitly.
int OneQuarterOfRoom(Pool& pool) {
  EXPECT_TRUE(pool.Place(Fraction("inf", "b", 750, "production-inference"), {{"n", 0}}).ok());
  EXPECT_TRUE(pool.Place(Fraction("q0", "b", 250), {{"n", 1}}).ok());
  EXPECT_TRUE(pool.Place(Fraction("q1", "b", 250), {{"n", 2}}).ok());
  const int inf = GpuOf(pool, "inf");
  EXPECT_NE(GpuOf(pool, "q0"), inf);
  EXPECT_NE(GpuOf(pool, "q1"), inf);
  EXPECT_NE(GpuOf(pool, "q0"), GpuOf(pool, "q1"));
  return inf;
}

TEST(SchedulerMove, TwoPlansNeverCountOnTheSameRoom) {
  Pool pool(kThreeGpus);
  const int inf = OneQuarterOfRoom(pool);
  // Both want a whole GPU; each could have one by moving a quarter, but there is room for only
  // one quarter to go. One moves; the other waits rather than strand a second mover.
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  ASSERT_TRUE(
      pool.s().Submit({.id = "d0", .team = "d", .priority_class = "experiment"}, 1000).ok());
  int moves = 0;
  std::vector<std::string> stopping;
  // Every revoked lease stops at its next cycle and asks again; many cycles, long enough for
  // every lease to become movable again.
  for (int64_t now = 1000; now < 1000 + 50 * 100; now += 100) {
    for (const std::string& id : stopping) {
      const LeaseRequest moved = pool.s().leases().at(id).request;
      ASSERT_TRUE(pool.s().Release(id, now).ok());
      LeaseRequest again = moved;
      again.id = absl::StrCat(moved.id, "-again");
      ASSERT_TRUE(pool.s().Submit(again, now).ok());
    }
    stopping.clear();
    CycleResult r = pool.s().Schedule(now);
    for (const Revocation& v : r.revoked) {
      ++moves;
      EXPECT_EQ(v.cause, RevokeCause::kMove);
      stopping.push_back(v.lease_id);
    }
    if (now == 1000) {
      // While the mover stops, its room is held: another team's quarter goes elsewhere.
      ASSERT_TRUE(pool.s().Submit(Fraction("c-late", "c", 250), now).ok());
    }
  }
  EXPECT_EQ(moves, 1);
  EXPECT_NE(GpuOf(pool, "c-late"), inf);
  // The moved quarter came back to the room held for it; nothing of b's waits.
  std::string again = pool.LeaseOf("q0-again").empty() ? "q1-again" : "q0-again";
  ASSERT_FALSE(pool.LeaseOf(again).empty());
  EXPECT_EQ(GpuOf(pool, again), inf);
  EXPECT_EQ(pool.s().ledger().Usage("b", "H100-80GB"), 1250);
  // Exactly one of a0 and d0 runs; the other has no whole GPU to be had.
  EXPECT_EQ(pool.s().ledger().Usage("a", "H100-80GB") + pool.s().ledger().Usage("d", "H100-80GB"),
            1000);
  EXPECT_EQ(pool.s().pending_count(), 1u);
}

TEST(SchedulerMove, RoomHeldForAMoverNobodyClaimsIsGivenBack) {
  Pool pool(kThreeGpus, {.move_hold_s = 120});
  const int inf = OneQuarterOfRoom(pool);
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  ASSERT_EQ(r.revoked[0].deadline_s, 1030);
  EXPECT_EQ(pool.s().NextTimedChange(1000), 1030 + 120);  // when the hold runs out
  // The mover's job ends instead of asking again.
  ASSERT_TRUE(pool.s().Release(r.revoked[0].lease_id, 1010).ok());
  ASSERT_THAT(pool.s().Schedule(1010).granted, SizeIs(1));  // a0
  // Until 30 s of grace and 120 s of hold have passed, the quarter beside inf is not free...
  ASSERT_TRUE(pool.s().Submit(Fraction("c-late", "c", 250), 1100).ok());
  ASSERT_THAT(pool.s().Schedule(1100).granted, SizeIs(1));
  EXPECT_NE(GpuOf(pool, "c-late"), inf);
  // ... then it is.
  pool.s().Schedule(1150);
  ASSERT_TRUE(pool.s().Submit(Fraction("c-later", "c", 250), 1150).ok());
  ASSERT_THAT(pool.s().Schedule(1150).granted, SizeIs(1));
  EXPECT_EQ(GpuOf(pool, "c-later"), inf);
}

TEST(SchedulerMove, ALeaseThatCannotMoveDoesNotHideOneThatCan) {
  // One node: "inf" (0.75, not preemptible), "big" (0.8, checkpointed just now: the cheapest to
  // move, but no GPU has 0.8 free) and "small" (0.25, which fits beside inf) each on a GPU.
  Pool pool(H100Pool(
      1, 3, {{"a", "nominal: 1"}, {"b", "nominal: 2"}, {"c", "nominal: 0, borrowing_limit: 1"}}));
  GrantInTurn(pool, {Fraction("inf", "b", 750, "production-inference"), Fraction("c0", "c", 250),
                     Fraction("big", "b", 800), Fraction("small", "b", 250)});
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("c0"), 0).ok());
  ASSERT_EQ(std::set<int>({GpuOf(pool, "inf"), GpuOf(pool, "big"), GpuOf(pool, "small")}).size(),
            3u);
  ASSERT_TRUE(pool.s().RecordCheckpoint(pool.LeaseOf("big"), 995).ok());
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].lease_id, pool.LeaseOf("small"));
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kMove);
}

TEST(SchedulerMove, OnlyTheLeasesThatMakeRoomAreMoved) {
  // GPU 0: inference 0.4 (stays), "tiny" 0.1 (the cheapest to move) and "mid" 0.25; GPU 1:
  // inference 0.55. a's half GPU needs 0.5 free on one GPU: moving mid alone gives it; taking the
  // cheap tiny first, then mid, would move tiny for nothing.
  Pool pool(H100Pool(1, 2, {{"a", "nominal: 1"}, {"b", "nominal: 1.5"}}));
  ASSERT_TRUE(pool.Place(Fraction("inf", "b", 400, "production-inference"), {{"n", 0}}).ok());
  ASSERT_TRUE(pool.Place(Fraction("tiny", "b", 100), {{"n", 0}}).ok());
  ASSERT_TRUE(pool.Place(Fraction("mid", "b", 250), {{"n", 0}}).ok());
  ASSERT_TRUE(pool.Place(Fraction("inf2", "b", 550, "production-inference"), {{"n", 1}}).ok());
  ASSERT_EQ(GpuOf(pool, "tiny"), GpuOf(pool, "inf"));
  ASSERT_EQ(GpuOf(pool, "mid"), GpuOf(pool, "inf"));
  ASSERT_NE(GpuOf(pool, "inf2"), GpuOf(pool, "inf"));
  ASSERT_TRUE(pool.s().RecordCheckpoint(pool.LeaseOf("tiny"), 999).ok());
  ASSERT_TRUE(pool.s().Submit(Fraction("a0", "a", 500), 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].lease_id, pool.LeaseOf("mid"));
}

TEST(SchedulerMove, ARequestCancelledAfterItsMoveGivesUpItsRoomAndClaim) {
  Pool pool(kTwoGpus);
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  const std::string moved = r.revoked[0].lease_id;
  ASSERT_FALSE(pool.s().ledger().FitsNominal("a", "H100-80GB", 1000));  // claimed while it waits
  ASSERT_TRUE(pool.s().Cancel("a0").ok());
  EXPECT_TRUE(pool.s().ledger().FitsNominal("a", "H100-80GB", 1000));
  // The revocation was sent: the mover still stops (as a preemption victim would).
  EXPECT_TRUE(pool.s().leases().at(moved).revoke_deadline_s.has_value());
  ASSERT_TRUE(pool.s().Release(moved, 1010).ok());
  // The GPU it left is nobody's now: a borrower may have it.
  ASSERT_TRUE(
      pool.s().Submit({.id = "c-whole", .team = "c", .priority_class = "experiment"}, 1010).ok());
  r = pool.s().Schedule(1010);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(r.granted[0], pool.LeaseOf("c-whole"));
}

TEST(SchedulerMove, ReclaimingAndMovingTogetherMakeRoomNeitherMakesAlone) {
  // GPU 0: b's quarter "q0" beside three borrowed quarters of c; GPU 1: b's "q1", two of c's, a
  // quarter free. a's whole GPU is guaranteed. Reclaiming every borrowed quarter leaves a quarter
  // of b on each GPU; moving alone has nowhere to go but one quarter. Reclaiming GPU 0's three and
  // moving q0 to the free quarter does it.
  Pool pool(kTwoGpus);
  GrantInTurn(pool, {Fraction("q0", "b", 250), Fraction("c0", "c", 250), Fraction("c1", "c", 250),
                     Fraction("c2", "c", 250), Fraction("q1", "b", 250), Fraction("c3", "c", 250),
                     Fraction("c4", "c", 250)});
  ASSERT_EQ(GpuOf(pool, "c2"), GpuOf(pool, "q0"));
  ASSERT_EQ(GpuOf(pool, "c4"), GpuOf(pool, "q1"));
  ASSERT_NE(GpuOf(pool, "q0"), GpuOf(pool, "q1"));
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  std::map<std::string, RevokeCause> revoked;
  for (const Revocation& v : r.revoked)
    revoked[pool.s().leases().at(v.lease_id).request.id] = v.cause;
  EXPECT_EQ(revoked, (std::map<std::string, RevokeCause>{{"c0", RevokeCause::kReclaim},
                                                         {"c1", RevokeCause::kReclaim},
                                                         {"c2", RevokeCause::kReclaim},
                                                         {"q0", RevokeCause::kMove}}));
  for (const Revocation& v : r.revoked) ASSERT_TRUE(pool.s().Release(v.lease_id, 1010).ok());
  ASSERT_TRUE(pool.s().Submit(Fraction("q0-again", "b", 250), 1010).ok());
  r = pool.s().Schedule(1010);
  ASSERT_THAT(r.granted, SizeIs(2));
  EXPECT_NE(GpuOf(pool, "a0"), GpuOf(pool, "q1"));
  EXPECT_EQ(GpuOf(pool, "q0-again"), GpuOf(pool, "q1"));
}

TEST(SchedulerMove, AHoldIsKeptFromARequestThatIsNotPlaced) {
  Pool pool(kThreeGpus);
  const int inf = OneQuarterOfRoom(pool);
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  // A quarter of b's in the mover's shape, beyond b's quota (which has no borrowing limit): it
  // waits, and must not give the held room away (to c's quarter, say).
  ASSERT_TRUE(pool.s().Submit(Fraction("bx", "b", 250), 1005).ok());
  pool.s().Schedule(1005);
  ASSERT_EQ(pool.ReasonOf("bx"), WaitReason::kOverQuota);
  ASSERT_TRUE(pool.s().Submit(Fraction("c-late", "c", 250), 1006).ok());
  ASSERT_THAT(pool.s().Schedule(1006).granted, SizeIs(1));
  EXPECT_NE(GpuOf(pool, "c-late"), inf);
  // bx is withdrawn (once the mover stops, b is within its quota again and bx would take the
  // room: it is b's work of the same shape). The mover stops and asks again: its room is there.
  ASSERT_TRUE(pool.s().Cancel("bx").ok());
  ASSERT_TRUE(pool.s().Release(r.revoked[0].lease_id, 1010).ok());
  ASSERT_TRUE(pool.s().Submit(Fraction("moved-again", "b", 250), 1010).ok());
  pool.s().Schedule(1010);
  ASSERT_FALSE(pool.LeaseOf("moved-again").empty());
  EXPECT_EQ(GpuOf(pool, "moved-again"), inf);
}

TEST(SchedulerMove, OneTeamsFailedPlanDoesNotStopAnothersOfTheSameShape) {
  // GPU Y: b's old quarter "bq" and a's young borrowed quarter "aq"; GPU X: b's inference "bi".
  // a's whole GPU (guaranteed) cannot have Y: its own borrowed quarter is not reclaimed for it
  // and too young to move. d's can: it reclaims aq and moves bq beside bi.
  Pool pool(H100Pool(1, 2, {{"a", "nominal: 1.25"}, {"b", "nominal: 0.5"}, {"d", "nominal: 1"}}));
  GrantInTurn(pool, {Fraction("bi", "b", 250, "production-inference"), Fraction("a3", "a", 250),
                     Fraction("a4", "a", 250), Fraction("a5", "a", 250), Fraction("bq", "b", 250),
                     Fraction("a1", "a", 250), Fraction("a2", "a", 250)});
  ASSERT_TRUE(pool.s().Submit(Fraction("aq", "a", 250), 500).ok());
  ASSERT_THAT(pool.s().Schedule(500).granted, SizeIs(1));
  ASSERT_TRUE(pool.s().leases().at(pool.LeaseOf("aq")).borrowing);
  for (const char* id : {"a1", "a2", "a3", "a4", "a5"}) {
    ASSERT_TRUE(pool.s().Release(pool.LeaseOf(id), 500).ok());
  }
  ASSERT_EQ(GpuOf(pool, "aq"), GpuOf(pool, "bq"));
  ASSERT_NE(GpuOf(pool, "bi"), GpuOf(pool, "bq"));

  ASSERT_TRUE(SubmitA0(pool, 700).ok());
  EXPECT_TRUE(pool.s().Schedule(700).revoked.empty());
  ASSERT_TRUE(pool.s().Submit({.id = "d0", .team = "d", .priority_class = "experiment"}, 710).ok());
  CycleResult r = pool.s().Schedule(710);
  std::map<std::string, RevokeCause> revoked;
  for (const Revocation& v : r.revoked) {
    revoked[pool.s().leases().at(v.lease_id).request.id] = v.cause;
    EXPECT_EQ(v.for_request, "d0");
  }
  EXPECT_EQ(revoked, (std::map<std::string, RevokeCause>{{"aq", RevokeCause::kReclaim},
                                                         {"bq", RevokeCause::kMove}}));
}

TEST(SchedulerMove, AYoungLeaseIsNotMoved) {
  Pool pool(kTwoGpus, {.min_run_before_move_s = 600});
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(SubmitA0(pool, 100).ok());
  CycleResult r = pool.s().Schedule(100);
  EXPECT_TRUE(r.revoked.empty());
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kFragmented);
  // Nothing else happening, the next cycle that could decide differently is when the leases
  // have run 600 s (a simulator with no timer of its own wakes then).
  EXPECT_EQ(pool.s().NextTimedChange(100), 600);
  EXPECT_TRUE(pool.s().Schedule(599).revoked.empty());  // one second short of 600 s run
  r = pool.s().Schedule(600);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kMove);
}

TEST(SchedulerMove, OffItWaitsFragmented) {
  Pool pool(kTwoGpus, {.move_for_guarantees = false});
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  ExpectA0WaitsFragmented(pool, 1000);
}

TEST(SchedulerMove, NonPreemptibleLeasesStay) {
  Pool pool(kTwoGpus);
  // Two inference services of b, one on each GPU (c fills GPU 0 in between).
  ASSERT_TRUE(pool.s().Submit(Fraction("inf0", "b", 250, "production-inference"), 0).ok());
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(pool.s().Submit(Fraction(absl::StrCat("c", i), "c", 250), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(4));
  ASSERT_TRUE(pool.s().Submit(Fraction("inf1", "b", 250, "production-inference"), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1));
  ASSERT_EQ(GpuOf(pool, "inf0"), 0);
  ASSERT_EQ(GpuOf(pool, "inf1"), 1);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(pool.s().Release(pool.LeaseOf(absl::StrCat("c", i)), 0).ok());
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  ExpectA0WaitsFragmented(pool, 1000);
}

TEST(SchedulerMove, NothingMovesWhenTheMoverWouldHaveNowhereToGo) {
  // Three GPUs each 60% used by b: 1.2 GPUs free in total, a whole GPU nowhere, and none of b's
  // leases fits beside another.
  Pool pool(H100Pool(1, 3, {{"a", "nominal: 1"}, {"b", "nominal: 2"}}));
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(pool.s().Submit(Fraction(absl::StrCat("f", i), "b", 600), 0).ok());
  ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(3));
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  ExpectA0WaitsFragmented(pool, 1000);
}

TEST(SchedulerMove, ARequestBeyondItsNominalQuotaMovesNothing) {
  Pool pool(H100Pool(1, 2,
                     {{"a", "nominal: 0, borrowing_limit: 1"},
                      {"b", "nominal: 2"},
                      {"c", "nominal: 0, borrowing_limit: 2"}}));
  ScatterTwoQuarters(pool);
  ASSERT_TRUE(SubmitA0(pool, 1000).ok());
  ExpectA0WaitsFragmented(pool, 1000);
}

TEST(SchedulerMove, AGangGetsANodeByMovingASingleBesideAnother) {
  // Two nodes of two GPUs, one single-GPU lease of b on each ("one-a", "one-b"). a's pair (same
  // node) needs a node to itself: one of them moves beside the other.
  Pool pool(H100Pool(
      2, 2, {{"a", "nominal: 2"}, {"b", "nominal: 2"}, {"c", "nominal: 0, borrowing_limit: 1"}}));
  const auto node_of = [&](const std::string& id) {
    return pool.s().leases().at(pool.LeaseOf(id)).gpus[0].node;
  };
  // Packing would put one-b beside one-a: c holds that GPU meanwhile.
  for (const char* id : {"one-a", "c", "one-b"}) {
    ASSERT_TRUE(
        pool.s()
            .Submit({.id = id, .team = id[0] == 'c' ? "c" : "b", .priority_class = "experiment"}, 0)
            .ok());
    ASSERT_THAT(pool.s().Schedule(0).granted, SizeIs(1));
  }
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("c"), 0).ok());
  ASSERT_NE(node_of("one-a"), node_of("one-b"));
  const std::map<std::string, std::string> kept = {{"one-a", "one-b"},
                                                   {"one-b", "one-a"}};  // -> the other

  ASSERT_TRUE(pool.s()
                  .Submit({.id = "pair",
                           .team = "a",
                           .priority_class = "experiment",
                           .slot_count = 2,
                           .topology = GangTopology::kSameNode},
                          1000)
                  .ok());
  CycleResult r = pool.s().Schedule(1000);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].cause, RevokeCause::kMove);
  const std::string moved = pool.s().leases().at(r.revoked[0].lease_id).request.id;
  const std::string stays = kept.at(moved);
  ASSERT_TRUE(pool.s().Release(r.revoked[0].lease_id, 1010).ok());
  ASSERT_TRUE(
      pool.s()
          .Submit({.id = moved + "-again", .team = "b", .priority_class = "experiment"}, 1010)
          .ok());
  r = pool.s().Schedule(1010);
  ASSERT_THAT(r.granted, SizeIs(2));
  EXPECT_NE(node_of("pair"), node_of(stays));
  EXPECT_EQ(node_of(moved + "-again"), node_of(stays));
}

}  // namespace
}  // namespace gpupool::pool
