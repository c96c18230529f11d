// File: pool/scheduler/scheduler.h
//
// The pool scheduler: decides which pending lease request gets which GPU slots, honouring team
// quotas (nominal, borrowing, lending), priorities, fair share, health and gang topology, and
// decides which leases to revoke to make room. Event driven and deterministic: the same calls in
// the same order give the same decisions (no clocks or hash orders inside; time is passed in).
//
//   Scheduler s(inventory, config);
//   absl::StatusOr<std::string> id = s.Submit(request, now);   // refused: never fits / invalid
//   CycleResult r = s.Schedule(now);   // grants and revocations of this cycle
//   s.Release(lease_id, now);          // a lease ended (or its task stopped after a revocation)
//
// Order of pending requests: those within their team's nominal quota before those that would
// borrow (as Kueue orders its heads), then priority value (high first), then the team's weighted
// dominant share minus an ageing credit (low first), then submission order. Guaranteed work
// first, because a borrower admitted ahead of it in the same cycle would only be reclaimed by it
// at once: a preemption, a lost notebook and a restart for nothing. The ageing credit grows with
// waiting time (one share unit per `aging_horizon_s`), so a request cannot wait forever behind
// an endless stream of equal-priority work from teams with a smaller share (guaranteed work is
// no endless stream: it is bounded by the nominal quotas). Within a team this lets a request that
// fits nominal quota go before the team's higher-priority one that would borrow; if that one then
// cannot borrow, it preempts the team's lower-priority work as Kueue's withinClusterQueue
// LowerPriority does. Holding the first back instead would let other teams' borrowers take the
// room and then be reclaimed by it, past its grace period.
//
// Gangs: the first request in that order that cannot be placed for lack of room (not quota) and
// needs several slots gets a reservation on the GPUs where it can start soonest, predicted from
// the running leases' runtime estimates. Later requests may use reserved GPUs only when their own
// runtime estimate ends before that start (backfill), so they never delay the gang.
//
// Preemption: a request within its team's nominal quota (guaranteed) may reclaim capacity that
// other teams borrow; any request may preempt strictly lower-priority leases of its own team.
// Non-preemptible leases are never revoked. Victims are chosen to minimise the GPU-seconds of
// work lost since their last checkpoint, then their number. Two requests cannot preempt each
// other back and forth: borrowers never preempt, and a guaranteed request never borrows.
//
// Defragmentation: a guaranteed request that neither fits nor can reclaim or preempt, while
// enough capacity is free in total (kFragmented), or would be once borrowed capacity is
// reclaimed, moves preemptible single-GPU leases of any team that fit elsewhere now
// (move_planner.h), reclaiming borrowed single-GPU leases beside them where that helps: they are
// revoked with RevokeCause::kMove (or kReclaim) and their grace period, and the GPUs they leave
// are reserved for it. The room each moved lease will take again is held for it (taken out of
// the free capacity) until a request of the same team and shape is placed, which takes it, or
// until move_hold_s after its revocation deadline. The moved leases' teams keep their quota. A request cancelled after its moves were issued does
// not take them back, as with preemption: the revocations have been sent.
//
// Spare reserves (the configuration's `reserve:`): per group, whole GPUs kept entirely free for
// requests of classes at or above a named one, which are placed on them at once; other requests
// are placed only where the reserve stays whole, and the reserve refills by reclaiming borrowed
// work of lower classes. Semantics in spare_reserve.h; implemented in scheduler_reserve.cc.
//
// Thread-compatible: the head serialises calls.
#ifndef GPUPOOL_POOL_SCHEDULER_SCHEDULER_H_
#define GPUPOOL_POOL_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <tuple>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/config/scheduling_config.h"
#include "pool/inventory.h"
#include "pool/scheduler/capacity.h"
#include "pool/scheduler/free_capacity_index.h"
#include "pool/placement/placement_policy.h"
#include "pool/placement/shape_distribution.h"
#include "pool/scheduler/placement.h"
#include "pool/scheduler/policy_view.h"
#include "pool/scheduler/lease_request.h"
#include "pool/scheduler/quota_ledger.h"
#include "pool/scheduler/spare_reserve.h"
#include "pool/scheduler/victim_census.h"
#include "pool/scheduler/wait_reason.h"

namespace gpupool::pool {

struct SchedulerOptions {
  int64_t aging_horizon_s = 3600;  // waiting this long is worth one unit of dominant share
  // Where a request whose slots go on one node is placed: a placement policy of
  // pool/placement/policy_registry.h ("gpupool", the default, is the policy `gpupool simulate`
  // and bench/openb measure; it learns the workload's shapes from the requests submitted), or
  // "packing": the scheduler's own tightest-GPU, fullest-node rule for every request. Requests
  // the policy cannot answer exactly (gangs over several nodes, reservations in play: see
  // policy_view.h) are placed by packing either way. ValidPlacementPolicy checks a name.
  std::string placement_policy = "gpupool";
  // What the policy may be told before the first request: the expected workload for "fgd",
  // which (as its paper defines it) measures against a trace's shapes known in advance, and the
  // seed of "random". gpupool's own policy learns online and needs neither.
  std::vector<placement::ShapeSample> placement_prior;
  uint64_t placement_seed = 0;
  bool first_fit = false;          // baseline placement (lowest GPUs that fit) instead of packing
  // When set, Schedule appends the duration of every decision (one request placed or found
  // unplaceable for now), in nanoseconds. For benchmarks; not owned.
  std::vector<int64_t>* decision_nanos = nullptr;
  // ... and beside each, whether it placed the request (1) or found it unplaceable for now (0).
  std::vector<char>* decision_placed = nullptr;
  // Assumed runtime of leases without an estimate, when predicting when a gang can start.
  int64_t default_runtime_s = 3600;
  // Defragmentation: a guaranteed request that finds its room scattered over partly used GPUs
  // moves leases that fit elsewhere now (move_planner.h). Off, it waits for leases to end.
  bool move_for_guarantees = true;
  // A lease is moved only after running this long, so no lease is moved again and again.
  int64_t min_run_before_move_s = 600;
  // How long past its revocation deadline the room found for a moved lease is held for it
  // (enough for its job to checkpoint, stop and ask again).
  int64_t move_hold_s = 120;
};

// OK for a name SchedulerOptions::placement_policy accepts, else InvalidArgument listing them.
absl::Status ValidPlacementPolicy(const std::string& name);

struct Lease {
  std::string id;          // "<request id>#<n>": one lease per admitted request
  LeaseRequest request;
  std::vector<GpuRef> gpus;  // one per slot
  std::string group;
  int64_t milli = 0;       // quota charge
  bool borrowing = false;  // admitted beyond nominal quota: reclaimable by owners
  int64_t started_s = 0;
  int64_t last_checkpoint_s = 0;
  std::optional<int64_t> revoke_deadline_s;  // set once revoked
  std::string revoked_for;                   // the request it was revoked to make room for
  // How long the request waited, continuously guaranteed (within its team's nominal quota),
  // until this grant; absent when it was not guaranteed when granted.
  std::optional<int64_t> guaranteed_wait_s;
};

// kMove: defragmentation (move_planner.h); the lease is placed again on room free now.
enum class RevokeCause { kReclaim, kPriority, kDrain, kMove };
absl::string_view RevokeCauseName(RevokeCause cause);

struct Revocation {
  std::string lease_id;
  RevokeCause cause;
  int64_t deadline_s = 0;       // stop by then: the class's grace period
  std::string for_request;      // the request it makes room for (empty for drains)
  double gpu_seconds_at_risk = 0;  // work since the lease's last checkpoint
};

struct CycleResult {
  std::vector<std::string> granted;   // lease ids, in grant order
  std::vector<Revocation> revoked;
  std::vector<std::string> expired;   // revoked leases force-released at their deadline
};

struct PendingInfo {
  std::string request_id;
  WaitReason reason = WaitReason::kNone;
  int64_t submitted_s = 0;
  std::optional<int64_t> reserved_start_s;  // a gang holding the head-of-line reservation
  std::optional<int64_t> guaranteed_since_s;  // within its team's nominal quota since then
  std::string team;            // the request's, for operators' views and metrics
  std::string priority_class;  // the request's class as given ("" = the default class)
};

class Scheduler {
 public:
  // `inventory` and `config` must outlive the scheduler.
  Scheduler(const Inventory& inventory, const SchedulingConfig& config,
            SchedulerOptions options = {});
  // Not copyable or movable: the free-capacity indexes refer to topology_.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates and queues. InvalidArgument for malformed requests, FailedPrecondition for requests
  // that can never be admitted (no matching GPU, topology larger than any node or island, beyond
  // the team's quota), Unimplemented for MIG and MPS slots (not placed by the scheduler yet),
  // AlreadyExists for a duplicate id.
  absl::StatusOr<std::string> Submit(LeaseRequest request, int64_t now_s);
  // A request accepted before this scheduler existed (a head restarted from its journal) keeps
  // its place: as Submit, but it counts as submitted at `submitted_s` (at most `now_s`), which
  // orders it among equals and gives it the ageing credit it earned.
  absl::StatusOr<std::string> Resubmit(LeaseRequest request, int64_t now_s, int64_t submitted_s);
  // Withdraws a pending request; NotFound when it is not pending.
  absl::Status Cancel(const std::string& request_id);
  // Ends a lease (normally, or after a revocation); its capacity returns to the pool.
  absl::Status Release(const std::string& lease_id, int64_t now_s);
  // A lease granted before this scheduler existed (a head restarted from its journal) is taken
  // back as it was: its GPUs and its quota charge, so nothing else is placed there. The clock
  // restarts with the scheduler, so started_s and last_checkpoint_s become `now_s`; a revocation
  // under way is forgotten (a reclaim that still needs the capacity revokes again).
  // FailedPrecondition naming what no longer fits (an unknown GPU, group, team or class, or a
  // GPU without room for the slot); AlreadyExists for a lease id already held. Nothing changes
  // on failure.
  absl::Status Adopt(Lease lease, int64_t now_s);
  // A lease's task committed a checkpoint: work before `now_s` is safe from preemption.
  absl::Status RecordCheckpoint(const std::string& lease_id, int64_t now_s);
  // A GPU's health changed. Draining or lost GPUs get no new leases; leases on a draining GPU
  // are revoked with their grace period, those on a lost GPU are released at once.
  CycleResult SetGpuHealth(const GpuRef& gpu, HealthState state, int64_t now_s);

  // One scheduling cycle at time `now_s`.
  CycleResult Schedule(int64_t now_s);

  // The next time after `now_s` at which a cycle could decide differently with nothing else
  // happening: a lease old enough to move for a request whose move plan failed, room held for a
  // moved lease running out. nullopt when none. A head that runs cycles only on events (the
  // simulator) should run one then; the embedded pool's periodic tick covers it anyway.
  std::optional<int64_t> NextTimedChange(int64_t now_s) const;

  const std::map<std::string, Lease>& leases() const { return leases_; }
  // Whether nothing is placed on, held or reserved on `gpu` (false for a GPU the pool lacks):
  // what a diagnostic's lease needs to stay, since anything placed there interrupts it
  // (runtime/service/diagnostic_holds.h). Health is not looked at.
  bool GpuIdle(const GpuRef& gpu) const;
  std::vector<PendingInfo> Pending() const;  // in scheduling order of the last cycle
  // Milli-GPUs of waiting requests that the free capacity could hold now by placement alone
  // (healthy GPUs, host capacity; not quotas, fair share, priorities, reservations or the spare
  // reserve), each judged alone, counted until `enough`: what the simulator charges as capacity
  // left idle while work that fit it waited.
  int64_t WaitingMilliThatFitsNow(int64_t enough) const;
  // Pending requests counted by (team, priority class as given, wait reason), without copying the
  // queue: what a metrics scrape shows, cheap at 100,000 requests.
  std::map<std::tuple<std::string, std::string, WaitReason>, int64_t> PendingCounts() const;
  size_t pending_count() const { return pending_.size(); }
  // Every configured spare reserve with its spare GPUs now, in configuration order.
  std::vector<ReserveStatus> Reserves() const;
  const QuotaLedger& ledger() const { return ledger_; }
  const PoolTopology& topology() const { return topology_; }

 private:
  // The GPUs a request's static constraints allow, per quota group; shared by every request with
  // the same constraints (most requests share a handful of shapes).
  struct Eligibility {
    std::map<std::string, std::vector<int>> candidates;  // group -> GPU positions, ascending
    // group -> the free capacity of those candidates on the live state (state_), kept up to date
    // by RefreshGpus after every change to state_.
    std::map<std::string, std::unique_ptr<FreeCapacityIndex>> index;
    // The same candidates as the placement policy sees them (policy_view.h), per group and, when
    // there are several groups, all together (a policy then chooses across models).
    std::map<std::string, std::unique_ptr<PolicyView>> views;
    std::unique_ptr<PolicyView> all_groups;
  };
  struct PendingRequest {
    LeaseRequest request;
    int64_t submitted_s = 0;
    uint64_t handle = 0;  // unique, never 0: owns reservations
    WaitReason reason = WaitReason::kNone;
    bool victims_pending = false;  // revocations were issued for it
    // Quota claimed in the ledger while its victims stop (QuotaLedger::Claim); 0 when none.
    std::string claimed_group;
    int64_t claimed_milli = 0;
    std::optional<int64_t> reserved_start_s;
    std::optional<int64_t> guaranteed_since_s;  // within nominal quota continuously since
    // Derived once at submission, used every cycle: the GPUs its constraints allow (an entry of
    // eligibility_, whose nodes never move) and its shape as a memo key.
    const Eligibility* eligibility = nullptr;
    std::string shape_key;
  };

  const PriorityClass& ClassOf(const LeaseRequest& r) const;
  absl::Status Validate(const LeaseRequest& r) const;
  const Eligibility& EligibilityOf(const LeaseRequest& r);
  // Quota charge of the whole request if placed in `group`.
  int64_t RequestMilli(const LeaseRequest& r, const std::string& group) const;
  std::optional<std::vector<int>> Place(const PendingRequest& p, const std::vector<int>& candidates,
                                        const CapacityState& state, PlacementOptions options) const;
  // Place on the live state, through the group's free-capacity index where it answers. Honours
  // the group's spare reserve unless options.ignore_spare_reserve.
  std::optional<std::vector<int>> PlaceLive(const PendingRequest& p, const std::string& group,
                                            PlacementOptions options) const;
  // The same, blind to the spare reserve.
  std::optional<std::vector<int>> PlaceLiveAnywhere(const PendingRequest& p, const std::string& group,
                                                    PlacementOptions options) const;
  // Place on any state (a what-if copy) by the scan, honouring the group's spare reserve.
  std::optional<std::vector<int>> PlaceHonouringReserve(const PendingRequest& p, const std::string& group,
                                                        const std::vector<int>& candidates,
                                                        const CapacityState& state,
                                                        PlacementOptions options) const;
  // The reserve that binds `p` in `group` (its class is below the reserve's), or nullptr.
  const ReserveRule* RestrictedBy(const PendingRequest& p, const std::string& group) const;
  // Whether `gpus` (a placement of `r` on `state`) leave `rule` at least its reserve.
  bool LeavesReserve(const CapacityState& state, const LeaseRequest& r, const std::vector<int>& gpus,
                     const ReserveRule& rule, int spare) const;
  // Reclaims borrowed work of lower classes for reserves that are short (spare_reserve.h).
  void RefillReserves(int64_t now_s, CycleResult& result);
  // A copy of state_ with `rule`'s reserve (as many spare GPUs, the highest positions) made
  // unschedulable: what a restricted request's move plan may use.
  CapacityState WithoutReserve(const ReserveRule& rule) const;
  // Where the policy would place `p` among every group's candidates at once; answered only when
  // the policy can answer exactly (policy_view.h).
  PolicyAnswer PlaceAcrossGroups(const PendingRequest& p, PlacementOptions options) const;
  // After state_ changed on these GPUs: brings the indexes and reserved_gpus_ up to date.
  void RefreshGpus(const std::vector<int>& gpus);
  // Whether `p` fits its team's nominal quota now (in some group): admitted, it would not borrow.
  bool WithinNominal(const PendingRequest& p) const;
  bool TryAdmit(PendingRequest& p, int64_t now_s, CycleResult& result);
  void ClaimQuota(PendingRequest& p, const std::string& group);
  void DropClaim(PendingRequest& p);
  bool TryPreempt(PendingRequest& p, const std::string& group, bool guaranteed,
                  int64_t own_quota_to_free, int64_t now_s, CycleResult& result);
  // Defragmentation for a guaranteed request in `group` (move_planner.h).
  bool TryMove(PendingRequest& p, const std::string& group, int64_t now_s, CycleResult& result);
  // Places `p` in `group` with the room of a hold it matches (move_holds_) given back, and
  // consumes the hold when it is placed; nullopt (the hold kept) when none matches or p does not
  // fit even so.
  std::optional<std::vector<int>> PlaceOnMoveHold(const PendingRequest& p, const std::string& group,
                                                  PlacementOptions options);
  void ReleaseMoveHold(size_t index);
  // Capacity was given back, a GPU became schedulable or a reservation was dropped.
  void CapacityGrew() {
    ++growth_epoch_;
    ++freed_epoch_;
  }
  // Revokes `victim` for `p` and reserves the GPUs it leaves for p.
  void RevokeFor(PendingRequest& p, Lease& victim, RevokeCause cause, int64_t now_s,
                 CycleResult& result);
  WaitReason DiagnoseWait(const PendingRequest& p, const std::string& group, int64_t now_s) const;
  // DiagnoseWait's last question, for a request no placement fits even with reservations,
  // health and host capacity set aside: kFragmented or kNoFreeCapacity.
  WaitReason RoomWait(const PendingRequest& p, const std::string& group) const;
  void Grant(PendingRequest& p, const std::string& group, const std::vector<int>& gpus,
             bool borrowing, int64_t now_s, CycleResult& result);
  void GiveBack(const Lease& lease, CapacityState& state) const;
  void ReleaseLease(std::map<std::string, Lease>::iterator it);
  Revocation Revoke(Lease& lease, RevokeCause cause, const std::string& for_request, int64_t now_s);
  void ClearReservations(uint64_t handle);
  bool VictimsStillRunning(const std::string& request_id) const;
  // Reserves, for a blocked gang, the GPUs where it can start soonest.
  void ReserveForGang(PendingRequest& p, int64_t now_s);
  // A key under which requests of the same shape fail alike while capacity only shrinks (combined
  // with the quota group and BackfillKey, when used). Leaves the runtime estimate out: placement
  // sees it only through the gang reservations it lets a request backfill.
  static std::string ShapeKey(const LeaseRequest& r);
  // The gang reservations `r` may backfill at `now_s`, named by their expected start times:
  // requests with equal keys may use the same reserved GPUs. Empty when none.
  std::string BackfillKey(const LeaseRequest& r, int64_t now_s) const;

  // Constant after construction.
  const SchedulingConfig* config_;
  SchedulerOptions options_;
  PoolTopology topology_;
  // Chooses where single-node requests go; null with "packing". Learns from every submission.
  std::unique_ptr<placement::PlacementPolicy> policy_;

  CapacityState state_;
  SpareReserves reserves_;            // counts state_'s spare GPUs (RefreshGpus)
  // Per reserve group, state_epoch_ when a refill last found nothing to reclaim.
  std::map<std::string, uint64_t> refill_futile_;
  std::set<int> reserved_gpus_;       // GPUs of state_ with a reservation of either kind
  std::set<int> gang_reserved_gpus_;  // ... with a head-of-line gang reservation
  QuotaLedger ledger_;
  std::map<std::string, PendingRequest> pending_;  // by request id
  std::vector<std::string> order_;                 // pending ids in last cycle's order
  std::map<std::string, Lease> leases_;            // by lease id
  VictimCensus victims_;                           // the unrevoked preemptible leases_, counted
  uint64_t next_handle_ = 1;
  std::map<std::string, Eligibility> eligibility_;  // by constraint signature
  // Whether a shape fits the empty pool, and in which group: Submit asks once per shape.
  std::map<std::string, std::optional<std::string>> fits_empty_pool_;
  // Placement failures remembered while capacity has only shrunk: `growth_epoch_` changes
  // whenever capacity is given back, a GPU becomes healthy or a reservation is dropped.
  uint64_t growth_epoch_ = 0;
  // Changes with every change to state_ (RefreshGpus): a remembered wait reason is exact only
  // while it has not moved.
  uint64_t state_epoch_ = 0;
  struct FailedPlacement {
    uint64_t growth_epoch;
    uint64_t state_epoch;
    WaitReason reason;
  };
  std::map<std::string, FailedPlacement> failed_;
  // Preemption plans that could not make room even by revoking every candidate victim,
  // remembered while capacity has not grown. A grant does not revive them: a new lease that is a
  // candidate takes from free capacity exactly what revoking it would give back, and one that is
  // not only shrinks capacity. (No candidate at all is asked of victims_ instead, each time.)
  std::map<std::string, uint64_t> preempt_failed_;
  // Move plans that found nothing, remembered across cycles (planning walks every lease) while
  // no capacity has been freed (`freed_epoch_`, which unlike growth_epoch_ does not change every
  // cycle) and until the next time a lease becomes old enough to move. A lease granted since is
  // younger than any that existed, so `retry_at_s` never passes min_run_before_move_s from then.
  // A lease granted as borrowing since (`borrowed_epoch_`) may be reclaimed at once: it revives
  // them too.
  struct FailedMove {
    uint64_t freed_epoch;
    uint64_t borrowed_epoch;
    int64_t retry_at_s;
  };
  std::map<std::string, FailedMove> move_failed_;
  uint64_t freed_epoch_ = 0;
  uint64_t borrowed_epoch_ = 0;
  // Room held for moved leases (TryMove): taken out of state_ until a request of the same team
  // and shape is admitted in the group (within its quota), or until `until_s`.
  struct MoveHold {
    int gpu;
    SlotShape slot;
    std::string team;
    std::string shape_key;
    std::string group;
    int64_t until_s;
  };
  std::vector<MoveHold> move_holds_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_SCHEDULER_H_
