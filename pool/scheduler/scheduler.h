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
// A cycle is a sequence of stages around a per-cycle state, in the Kubernetes scheduling
// framework's spirit (scheduler_cycle.cc):
//
//   order            the queue, decided once at the cycle's start (queue_order.h)
//   quota pre-filter the quota groups a request may be admitted in, guaranteed ones first
//   filter, score    where it goes: the placement policy (pool/placement) on the nodes the
//                    free-capacity index and policy view hand it (policy_view.h)
//   post-filter      room made by reclaim and priority preemption (preemption_planner.h) or by
//                    moving leases (move_planner.h), scheduler_post_filter.cc
//   reserve          a grant takes GPUs and quota; a request waiting for its victims holds the
//                    room its plan places it on and claims its quota (Unreserve undoes both,
//                    idempotently)
//   permit           a gang that lacks room holds the GPUs where it can start soonest
//
// Searches that found nothing are remembered under typed keys until an event could change the
// answer; decision_memo.h is the one place that says which events those are.
//
// Order of pending requests (queue_order.h): those within their team's nominal quota before those
// that would borrow (as Kueue orders its heads), then priority, then the team's weighted
// dominant share less an ageing credit, then submission order. Within a team this lets a request
// that fits nominal quota go before the team's higher-priority one that would borrow; if that one
// then cannot borrow, it preempts the team's lower-priority work as Kueue's withinClusterQueue
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
// Non-preemptible leases are never revoked. Victims are chosen cheapest first (work lost since
// their last checkpoint), then as few as needed (preemption_planner.h). Two requests cannot
// preempt each other back and forth: borrowers never reclaim, and a guaranteed request never
// borrows. While its victims stop, the request holds the room its plan places it on (Hold): its
// slots' share of each GPU and of each node's host CPU and memory, taken out of the free
// capacity as far as it is free when the plan is made, and the rest as its victims stop. Only
// that share is held, not the victims' whole GPUs, so several requests can reclaim parts of one
// shared GPU in the same cycle, and what a victim frees beyond the share is open to others.
//
// Defragmentation: a guaranteed request that neither fits nor can reclaim or preempt, while
// enough capacity is free in total (kFragmented), or would be once borrowed capacity is
// reclaimed, moves preemptible single-GPU leases of any team that fit elsewhere now
// (move_planner.h), reclaiming borrowed single-GPU leases beside them where that helps: they are
// revoked with RevokeCause::kMove (or kReclaim) and their grace period, and the room they leave
// is held for it as for a preemption. The room each moved lease will take again is held for it (taken out of
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
#include "pool/scheduler/decision_memo.h"
#include "pool/scheduler/free_capacity_index.h"
#include "pool/placement/placement_policy.h"
#include "pool/placement/shape_distribution.h"
#include "pool/scheduler/placement.h"
#include "pool/scheduler/policy_view.h"
#include "pool/scheduler/lease.h"
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
  // (healthy GPUs, host capacity; not quotas, fair share, priorities, reservations, room held
  // for preemptions or the spare reserve), each judged alone, counted until `enough`: what the simulator charges as capacity
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
  // Room a request waiting for its victims keeps on a GPU its plan places it on (TryPreempt,
  // TryMove): the share of that GPU and its node it needs there, and the part of that share taken
  // out of state_ for it so far. Free room is taken when the plan is made, and the rest as its
  // victims stop, so nothing else is placed in it, and only what the request needs is kept: the
  // rest of a GPU it shares with other work stays open to them, and to their own plans.
  struct Hold {
    int gpu = 0;
    Share need;
    Share held;
    Share lacking() const {
      Share s = need;
      s -= held;
      return s;
    }
  };
  struct PendingRequest {
    LeaseRequest request;
    int64_t submitted_s = 0;
    uint64_t handle = 0;  // unique, never 0: owns reservations
    WaitReason reason = WaitReason::kNone;
    bool victims_pending = false;  // revocations were issued for it
    std::vector<Hold> holds;       // while victims_pending: the room it keeps (Hold) ...
    std::vector<int> planned;      // ... on the GPUs its plan places it on, one per slot
    // Quota claimed in the ledger while its victims stop (QuotaLedger::Claim); 0 when none.
    std::string claimed_group;
    int64_t claimed_milli = 0;
    std::optional<int64_t> reserved_start_s;
    std::optional<int64_t> guaranteed_since_s;  // within nominal quota continuously since
    // Derived once at submission, used every cycle: the GPUs its constraints allow (an entry of
    // eligibility_, whose nodes never move) and its shape (decision_memo.h).
    const Eligibility* eligibility = nullptr;
    ShapeId shape;
  };

  // ---- The cycle (scheduler_cycle.cc), in the Kubernetes scheduling framework's spirit: stages
  // around a per-cycle state. For each pending request, in the order decided once at the cycle's
  // start: quota pre-filter -> filter and score (placement) -> post-filter (the preemption and
  // move planners) -> reserve (grant, or hold what the planners freed) -> permit (a gang that
  // must wait holds the GPUs where it starts soonest). ----

  // What one cycle knows, built at its start and passed through its stages.
  struct CycleState {
    int64_t now_s = 0;
    CycleResult result;
    std::vector<PendingRequest*> order;       // stage "order": the queue for this cycle
    std::set<int> gang_reserved_before;        // to tell movers when a gang reservation went away
    bool gang_reservation_taken = false;       // stage "permit": one head-of-line gang per cycle
    std::vector<std::string> admitted;         // erased from pending_ when the cycle ends
  };
  // A quota group a request may be admitted in, as the ledger sees it now.
  struct GroupCheck {
    const std::string* group;
    QuotaCheck quota;
    // A guaranteed request is not held back by other requests' gang reservations: the
    // guarantee outranks the prediction.
    bool guaranteed = false;
  };
  // One request's turn in a cycle: what its stages find out and hand on.
  struct Turn {
    PendingRequest& p;
    std::vector<GroupCheck> groups;  // stage "quota pre-filter": groups within nominal first
    BackfillSet backfill;            // the gang reservations it may backfill now
    WaitReason reason = WaitReason::kOverQuota;
    // Guaranteed groups where it lacks room: scattered (kFragmented), or short of it while some
    // other team borrows there (reclaiming alone could not free a whole slot): where moves may help.
    std::vector<const std::string*> short_of_room;
  };

  // Stage "order": expired revocations and holds go, memories start afresh, and the queue.
  void BeginCycle(CycleState& cycle);
  std::vector<PendingRequest*> OrderPending(int64_t now_s);
  // One request's turn through the stages below; true when it was granted.
  bool TakeTurn(PendingRequest& p, CycleState& cycle);
  // Stage "quota pre-filter": the groups it may be admitted in, guaranteed ones first (nominal
  // quota is used first, as Kueue's flavor fungibility does).
  std::vector<GroupCheck> QuotaPreFilter(const PendingRequest& p) const;
  // Stages "filter" and "score": where it goes on the live state (the policy, through the
  // pre-filter of the free-capacity index and policy view), every group at once when the quota
  // would take it alike in each; remembered when nothing is found.
  std::optional<std::pair<const std::string*, std::vector<int>>> PlaceAcrossGroups(Turn& turn, int64_t now_s);
  std::optional<std::vector<int>> PlaceInGroup(Turn& turn, const GroupCheck& check, int64_t now_s);
  // A request waiting for its victims, with its hold topped up: once the hold is complete, it is
  // given back (held_room) and the request placed where the policy prefers -- except beside a
  // spare reserve that binds it, where room given back would count as spare, and the plan's GPUs
  // are taken as held; until then, wherever room elsewhere freed first. nullopt: it waits (the
  // caller takes back what was given).
  std::optional<std::pair<const GroupCheck*, std::vector<int>>> PlaceWithHold(Turn& turn, int64_t now_s,
                                                                              bool& held_room);
  // A request whose hold is complete: its plan's GPUs, if they are still healthy and its quota
  // admits it in their group (gang reservations made since do not bind it there).
  std::optional<std::pair<const GroupCheck*, std::vector<int>>> PlaceOnHold(const Turn& turn, int64_t now_s) const;
  // Whether `p` holds all the room its plan places it on.
  static bool HoldComplete(const PendingRequest& p);
  // Stage "post-filter" (scheduler_post_filter.cc): make room by revoking (reclaim, priority
  // preemption: preemption_planner.h) or moving leases (move_planner.h). True when revocations
  // were issued for it; it then waits for them.
  bool PostFilter(Turn& turn, CycleState& cycle);
  bool TryPreempt(PendingRequest& p, const std::string& group, bool guaranteed,
                  int64_t own_quota_to_free, const BackfillSet& backfill, CycleState& cycle);
  bool TryMove(PendingRequest& p, const std::string& group, const BackfillSet& backfill, CycleState& cycle);
  // Stage "reserve": a grant takes its GPUs and quota; a request waiting for victims holds the
  // room its plan places it on (Hold) and claims its quota. Both undone by Unreserve, idempotently.
  void Grant(PendingRequest& p, const std::string& group, const std::vector<int>& gpus,
             bool borrowing, CycleState& cycle);
  void RevokeFor(PendingRequest& p, Lease& victim, RevokeCause cause, CycleState& cycle);
  // Holds for `p` its slots' share of `planned` (where a plan places it once its victims are
  // gone): what is free there now at once, the rest as they stop (TopUpHold).
  void HoldPlannedRoom(PendingRequest& p, const std::vector<int>& planned);
  // Takes for `p` what is free now of the share it still lacks (a victim stopped, or its turn ended).
  void TopUpHold(PendingRequest& p);
  // Gives back what `p` holds (to be placed, or when it stops waiting); true when it held anything.
  bool GiveBackHold(PendingRequest& p);
  void ClaimQuota(PendingRequest& p, const std::string& group);
  void Unreserve(PendingRequest& p);
  void DropClaim(PendingRequest& p);
  void DropGangReservation(uint64_t handle);
  // Stage "permit": a gang that lacks room reserves the GPUs where it can start soonest.
  void ReserveForGang(PendingRequest& p, int64_t now_s);
  // After every turn: reserves refill, and movers hear of a gang reservation gone.
  void EndCycle(CycleState& cycle);

  // ---- Placement on a capacity state (scheduler.cc) ----
  const PriorityClass& ClassOf(const LeaseRequest& r) const;
  absl::Status Validate(const LeaseRequest& r) const;
  const Eligibility& EligibilityOf(const LeaseRequest& r);
  ShapeId ShapeOf(const LeaseRequest& r);
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
  // Where the policy would place `p` among every group's candidates at once; answered only when
  // the policy can answer exactly (policy_view.h).
  PolicyAnswer PolicyAcrossGroups(const PendingRequest& p, PlacementOptions options) const;
  // After state_ changed on these GPUs: brings the indexes, gang_reserved_gpus_ and the memo's state
  // epoch up to date.
  void RefreshGpus(const std::vector<int>& gpus);
  // Whether `p` fits its team's nominal quota now (in some group): admitted, it would not borrow.
  bool WithinNominal(const PendingRequest& p) const;
  WaitReason DiagnoseWait(const PendingRequest& p, const std::string& group, int64_t now_s) const;
  // DiagnoseWait's last question, for a request no placement fits even with reservations,
  // health and host capacity set aside: kFragmented or kNoFreeCapacity.
  WaitReason RoomWait(const PendingRequest& p, const std::string& group) const;
  // The gang reservations `r` may backfill at `now_s` (decision_memo.h).
  BackfillSet BackfillOf(const LeaseRequest& r, int64_t now_s) const;

  // ---- Spare reserves (scheduler_reserve.cc) ----
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

  // ---- Room held for moved leases (scheduler_post_filter.cc) ----
  // Places `p` in `group` with the room of a hold it matches (move_holds_) given back, and
  // consumes the hold when it is placed; nullopt (the hold kept) when none matches or p does not
  // fit even so.
  std::optional<std::vector<int>> PlaceOnMoveHold(const PendingRequest& p, const std::string& group,
                                                  PlacementOptions options);
  void ReleaseMoveHold(size_t index);

  // ---- Leases (scheduler.cc) ----
  void GiveBack(const Lease& lease, CapacityState& state) const;
  void ReleaseLease(std::map<std::string, Lease>::iterator it);
  Revocation Revoke(Lease& lease, RevokeCause cause, const std::string& for_request, int64_t now_s);
  bool VictimsStillRunning(const std::string& request_id) const;

  // Constant after construction.
  const SchedulingConfig* config_;
  SchedulerOptions options_;
  PoolTopology topology_;
  // Chooses where single-node requests go; null with "packing". Learns from every submission.
  std::unique_ptr<placement::PlacementPolicy> policy_;

  CapacityState state_;
  SpareReserves reserves_;            // counts state_'s spare GPUs (RefreshGpus)
  std::set<int> gang_reserved_gpus_;  // GPUs of state_ with a head-of-line gang reservation
  QuotaLedger ledger_;
  std::map<std::string, PendingRequest> pending_;  // by request id
  std::vector<std::string> order_;                 // pending ids in last cycle's order
  std::map<std::string, Lease> leases_;            // by lease id; elements never move (victims_)
  VictimCensus victims_;                           // the unrevoked preemptible leases_, indexed
  uint64_t next_handle_ = 1;
  std::map<std::string, Eligibility> eligibility_;  // by constraint signature
  std::map<std::string, ShapeId> shapes_;           // interned shapes, by their text (ShapeOf)
  // Whether a shape fits the empty pool, and in which group: Submit asks once per shape (and,
  // beside spare reserves, class value).
  std::map<std::pair<ShapeId, int>, std::optional<std::string>> fits_empty_pool_;
  // Searches that found nothing, and when they go stale (decision_memo.h).
  DecisionMemo memo_;
  // Room held for moved leases (TryMove): taken out of state_ until a request of the same team
  // and shape is admitted in the group (within its quota), or until `until_s`.
  struct MoveHold {
    int gpu;
    SlotShape slot;
    std::string team;
    ShapeId shape;
    std::string group;
    int64_t until_s;
  };
  std::vector<MoveHold> move_holds_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_SCHEDULER_H_
