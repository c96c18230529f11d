// The scheduler's stage "reserve" for a request waiting for its victims: the room its plan places
// it on is held for it (Scheduler::Hold), taken out of the pool as it frees, and only as much of
// each GPU and node as it needs.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pool/scheduler/scheduler.h"
#include "tests/pool/scheduler_pool.h"

namespace gpupool::pool {
namespace {

using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

// One node of two H100 with 16 cores: team a owns one GPU, team b the other and may borrow one.
constexpr char kOneNode[] = R"(
nodes:
  - name: n
    cpus: 16
    gpus: [{model: H100-80GB, count: 2}]
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 1}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 1, borrowing_limit: 1}]
)";

LeaseRequest Request(const std::string& id, const std::string& team, SlotShape slot, int count = 1,
                     const std::string& cls = "experiment") {
  LeaseRequest r;
  r.id = id;
  r.team = team;
  r.priority_class = cls;
  r.slot = std::move(slot);
  r.slot_count = count;
  if (count > 1) r.topology = GangTopology::kSameNode;
  return r;
}

SlotShape Quarter() { return SlotShape::Fraction(16000, 250); }

SlotShape WholeWithCpu(int64_t cpu_milli) {
  SlotShape s;
  s.cpu_milli = cpu_milli;
  return s;
}

// Two GPUs owned by team a; team b borrows them.
constexpr char kGpuAndItsOwner[] = R"(
nodes:
  - name: n
    gpus: [{model: H100-80GB, count: 2}]
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 2}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 2}]
)";

// On kGpuAndItsOwner: b borrows GPU 1, and at t=10 a's 2-GPU gang reclaims it, counting on GPU 0
// (free) as well.
void GangReclaimsABorrowedGpu(Pool& pool) {
  ASSERT_TRUE(pool.Place(Request("b-borrowed", "b", SlotShape::WholeGpu()), {{"n", 1}}).ok());
  ASSERT_TRUE(pool.s().Submit(Request("a-gang", "a", SlotShape::WholeGpu(), 2, "training"), 10).ok());
  CycleResult r = pool.s().Schedule(10);
  ASSERT_THAT(r.revoked, SizeIs(1));
  ASSERT_EQ(r.revoked[0].for_request, "a-gang");
}

std::string RequestOf(const Scheduler& s, const std::string& lease_id) {
  return s.leases().at(lease_id).request.id;
}

// Before holds, the first guaranteed request to reclaim a quarter of a borrowed GPU reserved the
// whole GPU, and the second of the same burst could plan nothing there until the first was
// granted: a grace period late. Now both reclaim in the same cycle and start together.
TEST(SchedulerHold, GuaranteedRequestsReclaimQuartersOfOneBorrowedGpuInTheSameCycle) {
  Pool pool(kOneNode);
  // b's own quota on GPU 1, and four quarters it borrows on GPU 0.
  ASSERT_TRUE(pool.Place(Request("b-own", "b", SlotShape::WholeGpu()), {{"n", 1}}).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(pool.Place(Request("b" + std::to_string(i), "b", Quarter()), {{"n", 0}}).ok());
  }
  ASSERT_TRUE(pool.s().leases().at("b0#placed").borrowing);
  ASSERT_TRUE(pool.s().Submit(Request("a0", "a", Quarter()), 10).ok());
  ASSERT_TRUE(pool.s().Submit(Request("a1", "a", Quarter()), 10).ok());

  CycleResult r = pool.s().Schedule(10);
  EXPECT_TRUE(r.granted.empty());
  ASSERT_THAT(r.revoked, SizeIs(2));
  EXPECT_THAT((std::vector<std::string>{r.revoked[0].for_request, r.revoked[1].for_request}),
              UnorderedElementsAre("a0", "a1"));
  EXPECT_EQ(pool.ReasonOf("a0"), WaitReason::kWaitingForPreemption);
  EXPECT_EQ(pool.ReasonOf("a1"), WaitReason::kWaitingForPreemption);

  // At the grace period's end (30 s for experiments) both start, on the GPU their victims left.
  r = pool.s().Schedule(40);
  EXPECT_THAT(r.expired, SizeIs(2));
  ASSERT_THAT(r.granted, SizeIs(2));
  for (const std::string& id : r.granted) {
    EXPECT_EQ(pool.s().leases().at(id).gpus, (std::vector<GpuRef>{{"n", 0}})) << id;
    EXPECT_FALSE(pool.s().leases().at(id).borrowing) << id;
  }
  EXPECT_TRUE(r.revoked.empty());  // the other two quarters b borrows stay
}

// A gang's plan counts on a free GPU beside its victim's: that GPU is held at once, so work that
// arrives while the victim stops cannot take it and break the plan (which would revoke again).
TEST(SchedulerHold, TheFreeRoomAPlanCountsOnIsHeldWhileItsVictimsStop) {
  Pool pool(kGpuAndItsOwner);
  ASSERT_NO_FATAL_FAILURE(GangReclaimsABorrowedGpu(pool));

  // b asks for the GPU that is free now; it is held for the gang.
  ASSERT_TRUE(pool.s().Submit(Request("b-new", "b", SlotShape::WholeGpu()), 11).ok());
  CycleResult r = pool.s().Schedule(11);
  EXPECT_TRUE(r.granted.empty());
  EXPECT_TRUE(r.revoked.empty());
  EXPECT_FALSE(pool.s().GpuIdle({"n", 0}));  // held, so not idle for a diagnostic either

  ASSERT_TRUE(pool.s().Release("b-borrowed#placed", 20).ok());
  r = pool.s().Schedule(20);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(RequestOf(pool.s(), r.granted[0]), "a-gang");
  EXPECT_TRUE(r.revoked.empty());  // no second reclaim
  EXPECT_EQ(pool.ReasonOf("b-new"), WaitReason::kNoBorrowableCapacity);
}

// The host CPU a plan counts on is held too: what is free now at once, what the victim frees as
// it stops. A request that would take the free cores in between waits.
TEST(SchedulerHold, AHoldKeepsTheHostCpuThePlanCountsOn) {
  Pool pool(kOneNode);
  ASSERT_TRUE(pool.Place(Request("b-own", "b", WholeWithCpu(0)), {{"n", 1}}).ok());
  // b borrows GPU 0 with 12 of the node's 16 cores.
  ASSERT_TRUE(pool.Place(Request("b-borrowed", "b", WholeWithCpu(12000)), {{"n", 0}}).ok());
  ASSERT_TRUE(pool.s().leases().at("b-borrowed#placed").borrowing);
  // a needs its GPU and 14 cores: only 4 are free until b's lease stops.
  ASSERT_TRUE(pool.s().Submit(Request("a0", "a", WholeWithCpu(14000)), 10).ok());
  CycleResult r = pool.s().Schedule(10);
  ASSERT_THAT(r.revoked, SizeIs(1));
  EXPECT_EQ(r.revoked[0].lease_id, "b-borrowed#placed");

  // Four cores are free on the node, but a0 holds them (from another request of its team, which
  // would be admitted: host-only work takes no GPU quota).
  LeaseRequest cpu_only = Request("a-cpu", "a", SlotShape::HostOnly(4000, 0));
  ASSERT_TRUE(pool.s().Submit(cpu_only, 11).ok());
  r = pool.s().Schedule(11);
  EXPECT_TRUE(r.granted.empty());

  ASSERT_TRUE(pool.s().Release("b-borrowed#placed", 20).ok());
  r = pool.s().Schedule(20);
  ASSERT_THAT(r.granted, SizeIs(1));  // a0; the 2 cores left are too few for a-cpu
  EXPECT_EQ(RequestOf(pool.s(), r.granted[0]), "a0");
  EXPECT_EQ(pool.ReasonOf("a-cpu"), WaitReason::kNoHostCapacity);
}

// A request holds only its own share of a victim's GPU: the rest of what the victim frees is
// open to other work at once. Before holds, the victim's whole GPU was reserved until the holder
// was granted, so a request ordered before it in that cycle had to reclaim elsewhere.
TEST(SchedulerHold, OnlyTheShareARequestNeedsOfAVictimsGpuIsHeld) {
  constexpr char kPool[] = R"(
nodes:
  - name: n
    gpus: [{model: H100-80GB, count: 3}]
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 1}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 2}]
  - name: c
    quotas: [{gpus: H100-80GB, nominal: 2}]
)";
  Pool pool(kPool);
  ASSERT_TRUE(pool.Place(Request("c-own", "c", SlotShape::WholeGpu()), {{"n", 2}}).ok());
  ASSERT_TRUE(pool.Place(Request("b-whole", "b", SlotShape::WholeGpu()), {{"n", 1}}).ok());
  // b borrows GPU 0 in two halves.
  for (const char* id : {"b-half0", "b-half1"}) {
    ASSERT_TRUE(pool.Place(Request(id, "b", SlotShape::Fraction(40000, 500)), {{"n", 0}}).ok());
  }
  ASSERT_TRUE(pool.s().Submit(Request("a0", "a", Quarter()), 10).ok());
  CycleResult r = pool.s().Schedule(10);
  ASSERT_THAT(r.revoked, SizeIs(1));
  const std::string victim = r.revoked[0].lease_id;
  ASSERT_NE(victim, "b-whole#placed");

  // The half stops early; a0 holds a quarter of it. c, within its quota and ordered first (a
  // higher priority), takes the other quarter instead of reclaiming b's other leases.
  ASSERT_TRUE(pool.s().Release(victim, 15).ok());
  ASSERT_TRUE(pool.s().Submit(Request("c-quarter", "c", Quarter(), 1, "production-inference"), 15).ok());
  r = pool.s().Schedule(15);
  EXPECT_TRUE(r.revoked.empty());
  ASSERT_THAT(r.granted, SizeIs(2));
  for (const std::string& id : r.granted) {
    EXPECT_EQ(pool.s().leases().at(id).gpus, (std::vector<GpuRef>{{"n", 0}})) << id;
  }
  EXPECT_THAT((std::vector<std::string>{RequestOf(pool.s(), r.granted[0]), RequestOf(pool.s(), r.granted[1])}),
              UnorderedElementsAre("a0", "c-quarter"));
}

// A hold is given back when its request is withdrawn: the room is placeable again at once.
TEST(SchedulerHold, AWithdrawnRequestGivesItsHoldBack) {
  Pool pool(kGpuAndItsOwner);
  ASSERT_NO_FATAL_FAILURE(GangReclaimsABorrowedGpu(pool));
  EXPECT_FALSE(pool.s().GpuIdle({"n", 0}));
  ASSERT_TRUE(pool.s().Cancel("a-gang").ok());
  EXPECT_TRUE(pool.s().GpuIdle({"n", 0}));
  ASSERT_TRUE(pool.s().Submit(Request("b-new", "b", SlotShape::WholeGpu()), 11).ok());
  CycleResult r = pool.s().Schedule(11);
  ASSERT_THAT(r.granted, SizeIs(1));
  EXPECT_EQ(pool.s().leases().at(r.granted[0]).gpus, (std::vector<GpuRef>{{"n", 0}}));
}

// Beside a spare reserve with no GPU to spare, the whole GPU a victim leaves is the request's, not
// the reserve's: the request is placed there and nothing more is revoked. (A review found the
// first version of holds giving the GPU back to the pool for the request's own turn, where the
// reserve counted it as spare and the request revoked a second lease.)
TEST(SchedulerHold, TheReserveDoesNotTakeAVictimsGpuFromItsRequest) {
  constexpr char kPool[] = R"(
nodes:
  - name: n
    gpus: [{model: H100-80GB, count: 4}]
priority_classes:
  - {name: urgent, value: 2000, grace_period_s: 10}
  - {name: training, value: 500, grace_period_s: 120, checkpoint_interval_s: 600}
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 2}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 1, borrowing_limit: 3}]
reserve:
  - {group: H100-80GB, gpus: 1, for_priority_at_least: urgent}
)";
  for (const char* policy : {"gpupool", "packing"}) {
    SCOPED_TRACE(policy);
    Pool pool(kPool, {.placement_policy = policy});
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(pool.Place(Request("b" + std::to_string(i), "b", SlotShape::WholeGpu(), 1, "urgent"), {{"n", i}}).ok());
    }
    ASSERT_EQ(pool.s().Reserves().at(0).spare_gpus, 0);
    ASSERT_TRUE(pool.s().Submit(Request("a0", "a", SlotShape::WholeGpu(), 1, "training"), 10).ok());
    CycleResult r = pool.s().Schedule(10);
    ASSERT_THAT(r.revoked, SizeIs(1));
    const std::vector<GpuRef> victim_gpus = pool.s().leases().at(r.revoked[0].lease_id).gpus;
    r = pool.s().Schedule(25);  // the victim's 10 s grace period is over
    EXPECT_THAT(r.expired, SizeIs(1));
    ASSERT_THAT(r.granted, SizeIs(1));
    EXPECT_EQ(pool.s().leases().at(r.granted[0]).gpus, victim_gpus);
    EXPECT_TRUE(r.revoked.empty());
    EXPECT_EQ(pool.s().Reserves().at(0).spare_gpus, 0);
  }
}

// A head-of-line gang's reservation predicts the room a victim frees as the room of the request it
// was revoked for, not as free: it does not reserve that GPU for itself, and the request (which
// borrows, so gang reservations bind it) still gets its victim's GPU. (A review found the gang
// reserving it, and the victim stopped for nothing.)
TEST(SchedulerHold, AGangReservationLeavesAVictimsRoomToItsRequest) {
  constexpr char kPool[] = R"(
nodes:
  - name: n
    gpus: [{model: H100-80GB, count: 4}]
priority_classes:
  - {name: urgent, value: 2000, grace_period_s: 10}
  - {name: training, value: 500, grace_period_s: 20}
  - {name: experiment, value: 100, grace_period_s: 5}
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 2}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 1, borrowing_limit: 3}]
  - name: c
    quotas: [{gpus: H100-80GB, nominal: 2}]
)";
  const auto with_estimate = [](LeaseRequest r, int64_t estimate_s) {
    r.runtime_estimate_s = estimate_s;
    return r;
  };
  for (const char* policy : {"gpupool", "packing"}) {
    SCOPED_TRACE(policy);
    Pool pool(kPool, {.placement_policy = policy, .move_for_guarantees = false});
    const SlotShape whole = SlotShape::WholeGpu();
    ASSERT_TRUE(pool.Place(with_estimate(Request("b-other", "b", whole, 1, "urgent"), 100000), {{"n", 0}}).ok());
    ASSERT_TRUE(pool.Place(with_estimate(Request("b-low", "b", whole, 1, "experiment"), 100000), {{"n", 1}}).ok());
    ASSERT_TRUE(pool.Place(with_estimate(Request("c0", "c", whole, 1, "training"), 7200), {{"n", 2}}).ok());
    ASSERT_TRUE(pool.Place(with_estimate(Request("c1", "c", whole, 1, "training"), 100000), {{"n", 3}}).ok());
    // b, beyond its nominal quota, preempts its own lower-priority lease.
    ASSERT_TRUE(pool.s().Submit(Request("b-high", "b", whole, 1, "urgent"), 1).ok());
    CycleResult r = pool.s().Schedule(1);
    ASSERT_THAT(r.revoked, SizeIs(1));
    EXPECT_EQ(r.revoked[0].lease_id, "b-low#placed");
    // a's 2-GPU gang cannot start until c0 ends; it reserves where it will start then.
    ASSERT_TRUE(pool.s().Submit(Request("a-gang", "a", whole, 2, "training"), 2).ok());
    r = pool.s().Schedule(2);
    EXPECT_TRUE(r.granted.empty());
    r = pool.s().Schedule(7);  // b-low's 5 s grace period is over
    EXPECT_THAT(r.expired, SizeIs(1));
    ASSERT_THAT(r.granted, SizeIs(1));
    EXPECT_EQ(RequestOf(pool.s(), r.granted[0]), "b-high");
    EXPECT_EQ(pool.s().leases().at(r.granted[0]).gpus, (std::vector<GpuRef>{{"n", 1}}));
  }
}

// Room freed by work other than its victims completes a hold too, and the request starts in the
// same cycle. (A review found the hold completed only at the end of the request's turn, so it
// started a cycle later: in an event-driven simulator, as late as its victims' deadline.)
TEST(SchedulerHold, RoomFreedByOtherWorkCompletesAHoldAndItStartsInThatCycle) {
  constexpr char kPool[] = R"(
nodes:
  - name: n
    cpus: 16
    gpus: [{model: H100-80GB, count: 3}]
teams:
  - name: a
    quotas: [{gpus: H100-80GB, nominal: 1}]
  - name: b
    quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 2}]
  - name: c
    quotas: [{gpus: H100-80GB, nominal: 1}]
)";
  for (const char* policy : {"gpupool", "packing"}) {
    SCOPED_TRACE(policy);
    Pool pool(kPool, {.placement_policy = policy});
    ASSERT_TRUE(pool.Place(Request("v", "b", WholeWithCpu(8000)), {{"n", 1}}).ok());
    ASSERT_TRUE(pool.Place(Request("w", "c", WholeWithCpu(4000)), {{"n", 2}}).ok());
    // a needs a GPU and 8 cores: GPU 0 is free but only 4 cores are; b's borrowed lease is reclaimed.
    ASSERT_TRUE(pool.s().Submit(Request("a0", "a", WholeWithCpu(8000)), 10).ok());
    CycleResult r = pool.s().Schedule(10);
    ASSERT_THAT(r.revoked, SizeIs(1));
    EXPECT_EQ(r.revoked[0].lease_id, "v#placed");
    // c's lease ends first and frees the 4 cores a0 still lacks: a0 starts now, on GPU 0.
    ASSERT_TRUE(pool.s().Release("w#placed", 11).ok());
    r = pool.s().Schedule(11);
    ASSERT_THAT(r.granted, SizeIs(1));
    EXPECT_EQ(RequestOf(pool.s(), r.granted[0]), "a0");
  }
}

}  // namespace
}  // namespace gpupool::pool
