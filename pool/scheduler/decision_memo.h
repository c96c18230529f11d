// File: pool/scheduler/decision_memo.h
//
// What the scheduler remembers of searches that found nothing, and the one place that says when
// each memory goes stale. At 100,000 pending requests most requests of a cycle are shaped like
// one that already failed; asking the placement, the preemption planner or the move planner
// again would find nothing again, at the cost of a search of the pool each time.
//
//   DecisionMemo memo;
//   memo.StartCycle(now_s);                          // the cycle's stage "order" begins
//   if (memo.PreemptionFailed(key)) ...;             // skip a search known to fail
//   memo.RememberPreemptionFailure(key);
//   memo.CapacityGrew();                             // a lease ended: failures may now succeed
//
// Keys are typed structs (a request's shape is interned once at submission as a ShapeId);
// requests with equal keys fail alike. What invalidates a memory, in full:
//
//   memory                  forgotten when
//   placement failure       capacity grows (a lease ends, held room returns, a GPU becomes
//                           schedulable, a reservation is dropped) or a cycle starts: the gang
//                           reservations a request may backfill depend on the cycle's time.
//                           While only the state changed (capacity shrank: a grant, a new
//                           reservation) the failure still holds, but its wait reason may have
//                           changed (fragmented to no free capacity, a reservation now in the
//                           way): RecallPlacement says kShrunk, and the caller diagnoses again.
//   preemption failure      capacity grows or a cycle starts. A grant does not revive it: a new
//                           lease that is a candidate victim takes from free capacity exactly
//                           what revoking it would give back, and one that is not only shrinks
//                           capacity.
//   move failure            capacity is freed (as above, or a head-of-line gang reservation is
//                           dropped at a cycle's end), a lease is admitted as borrowing (it may
//                           be reclaimed at once), or the cycle's time reaches the key's retry
//                           time (the next lease becomes old enough to move). It outlives cycles:
//                           planning a move walks every lease.
//   futile reserve refill   any change to the state.
//
// Thread-compatible; owned by the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_DECISION_MEMO_H_
#define GPUPOOL_POOL_SCHEDULER_DECISION_MEMO_H_

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pool/scheduler/wait_reason.h"

namespace gpupool::pool {

// A request's shape: its static constraints, slot, slot count and gang topology, interned by the
// scheduler. Requests of one shape are placed alike on the same state. The runtime estimate is
// not part of it: placement sees it only through the gang reservations it may backfill.
struct ShapeId {
  uint32_t value = 0;
  auto operator<=>(const ShapeId&) const = default;
};

// The head-of-line gang reservations a request may backfill at the cycle's time, named by their
// expected start times, ascending: requests with equal sets may use the same reserved GPUs.
using BackfillSet = std::vector<int64_t>;

// A placement that found no room in one quota group, or (across_groups) in every group at once.
struct PlacementMemoKey {
  ShapeId shape;
  BackfillSet backfill;
  bool across_groups = false;
  std::string group;          // empty when across_groups
  bool borrowing = false;     // the quota check's verdict: it decides whether gang reservations bind
  bool beside_reserve = false;  // a spare reserve binds the request there
  auto operator<=>(const PlacementMemoKey&) const = default;
};

// A preemption plan that could not make room even by revoking every candidate victim.
struct PreemptionMemoKey {
  ShapeId shape;
  BackfillSet backfill;
  std::string group;
  std::string team;         // which leases are candidates depends on the team ...
  int priority = 0;         // ... its priority value ...
  bool guaranteed = false;  // ... and whether it may reclaim borrowed capacity
  int64_t own_quota_to_free = 0;
  auto operator<=>(const PreemptionMemoKey&) const = default;
};

// A move plan (move_planner.h) that found nothing.
struct MoveMemoKey {
  ShapeId shape;
  BackfillSet backfill;
  std::string group;
  std::string team;  // its own borrowed leases are not reclaimed for it
  bool beside_reserve = false;
  auto operator<=>(const MoveMemoKey&) const = default;
};

class DecisionMemo {
 public:
  // --- Events: what happened to the pool. Staleness is decided here and nowhere else. ---

  // Capacity was given back, a GPU became schedulable, or a reservation was dropped.
  void CapacityGrew() {
    ++growth_epoch_;
    ++freed_epoch_;
  }
  // Anything in the live capacity state changed, shrinking included.
  void StateChanged() { ++state_epoch_; }
  // A lease was admitted beyond its team's nominal quota: a guarantee may reclaim it at once.
  void BorrowingAdmitted() { ++borrowed_epoch_; }
  // A head-of-line gang reservation went away (granted, or moved to other GPUs): its GPUs are
  // room for movers, though nothing was given back.
  void GangReservationDropped() { ++freed_epoch_; }
  // A cycle starts at `now_s`.
  void StartCycle(int64_t now_s);

  // --- Placement failures ---
  enum class Recall {
    kUnknown,  // not remembered (or stale): search
    kExact,    // failed, and nothing changed since: `reason` is still the wait reason
    kShrunk,   // failed, and capacity has only shrunk since: fails again, `reason` may be stale
  };
  struct PlacementRecall {
    Recall recall = Recall::kUnknown;
    WaitReason reason = WaitReason::kNone;
  };
  PlacementRecall RecallPlacement(const PlacementMemoKey& key) const;
  // Remembers a failure with its wait reason as of now (kNone when the caller does not diagnose).
  void RememberPlacementFailure(const PlacementMemoKey& key, WaitReason reason);

  // --- Preemption and move plans ---
  bool PreemptionFailed(const PreemptionMemoKey& key) const;
  void RememberPreemptionFailure(const PreemptionMemoKey& key);
  bool MoveFailed(const MoveMemoKey& key, int64_t now_s) const;
  // `retry_at_s`: when the next lease too young to move now becomes old enough.
  void RememberMoveFailure(const MoveMemoKey& key, int64_t retry_at_s);
  // The soonest retry time of a remembered move failure after `now_s`.
  std::optional<int64_t> NextMoveRetry(int64_t now_s) const;

  // --- Spare reserves (spare_reserve.h) ---
  // Whether refilling `group`'s reserve found nothing to reclaim on the state as it is now.
  bool RefillFutile(const std::string& group) const;
  void RememberFutileRefill(const std::string& group);

 private:
  struct PlacementFailure {
    uint64_t growth_epoch;
    uint64_t state_epoch;
    WaitReason reason;
  };
  struct MoveFailure {
    uint64_t freed_epoch;
    uint64_t borrowed_epoch;
    int64_t retry_at_s;
  };
  bool Live(const MoveFailure& f, int64_t now_s) const {
    return f.freed_epoch == freed_epoch_ && f.borrowed_epoch == borrowed_epoch_ && now_s < f.retry_at_s;
  }

  uint64_t growth_epoch_ = 0;    // capacity grew, or a cycle started
  uint64_t state_epoch_ = 0;     // any change to the state
  uint64_t freed_epoch_ = 0;     // capacity grew, or a gang reservation was dropped (not per cycle)
  uint64_t borrowed_epoch_ = 0;  // a lease was admitted as borrowing
  std::map<PlacementMemoKey, PlacementFailure> placement_;
  std::map<PreemptionMemoKey, uint64_t> preemption_;  // -> growth epoch
  std::map<MoveMemoKey, MoveFailure> move_;
  std::map<std::string, uint64_t> futile_refill_;  // group -> state epoch
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_DECISION_MEMO_H_
