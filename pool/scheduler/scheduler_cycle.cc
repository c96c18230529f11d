// The Scheduler's cycle: its stages around the per-cycle state (scheduler.h says the order).
// Events outside the cycle (submit, release, health, adoption) are in scheduler.cc; the
// post-filter's planners in scheduler_post_filter.cc; spare reserves in scheduler_reserve.cc.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/queue_order.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {

CycleResult Scheduler::Schedule(int64_t now_s) {
  CycleState cycle;
  cycle.now_s = now_s;
  BeginCycle(cycle);
  order_.clear();
  for (PendingRequest* p : cycle.order) {
    auto started = std::chrono::steady_clock::now();
    const bool granted = TakeTurn(*p, cycle);
    if (options_.decision_nanos != nullptr) {
      options_.decision_nanos->push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - started)
                                             .count());
    }
    if (options_.decision_placed != nullptr) options_.decision_placed->push_back(granted ? 1 : 0);
    if (granted) {
      cycle.admitted.push_back(p->request.id);
      continue;
    }
    order_.push_back(p->request.id);
    // Stage "permit": the first gang in the order that lacks room (not quota) holds the GPUs
    // where it can start soonest; later requests backfill them only if they end before.
    const bool lacks_room = p->reason == WaitReason::kNoFreeCapacity || p->reason == WaitReason::kFragmented;
    if (!cycle.gang_reservation_taken && lacks_room && p->request.slot_count > 1) {
      ReserveForGang(*p, now_s);
      cycle.gang_reservation_taken = p->reserved_start_s.has_value();
    }
  }
  EndCycle(cycle);
  return std::move(cycle.result);
}

void Scheduler::BeginCycle(CycleState& cycle) {
  const int64_t now_s = cycle.now_s;
  // Revoked leases whose grace period is over are stopped now.
  std::vector<std::string> expired;
  for (const auto& [id, lease] : leases_) {
    if (lease.revoke_deadline_s.has_value() && *lease.revoke_deadline_s <= now_s) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    ReleaseLease(leases_.find(id));
    cycle.result.expired.push_back(id);
  }
  // Room held for moved work that did not come back for it.
  for (size_t i = move_holds_.size(); i-- > 0;) {
    if (move_holds_[i].until_s <= now_s) ReleaseMoveHold(i);
  }
  // The head-of-line gang reservation is recomputed every cycle from the current state (stage
  // "permit"); backfill verdicts depend on the time, so remembered failures start afresh too.
  cycle.gang_reserved_before = gang_reserved_gpus_;
  std::vector<int> unreserved(gang_reserved_gpus_.begin(), gang_reserved_gpus_.end());
  for (int g : unreserved) state_[g].gang_reserved_for = 0;
  RefreshGpus(unreserved);
  memo_.StartCycle(now_s);
  cycle.order = OrderPending(now_s);
}

std::vector<Scheduler::PendingRequest*> Scheduler::OrderPending(int64_t now_s) {
  std::map<std::string, double> share;  // per team, computed once per cycle
  std::vector<std::pair<QueueKey, PendingRequest*>> keyed;
  keyed.reserve(pending_.size());
  for (auto& [id, p] : pending_) {
    p.reserved_start_s.reset();
    auto [it, inserted] = share.try_emplace(p.request.team, 0.0);
    if (inserted) it->second = ledger_.WeightedDominantShare(p.request.team);
    keyed.push_back({{.borrowing = !WithinNominal(p),
                      .priority = ClassOf(p.request).value,
                      .share = AgedShare(it->second, now_s - p.submitted_s, options_.aging_horizon_s),
                      .handle = p.handle},
                     &p});
  }
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return QueueBefore(a.first, b.first); });
  std::vector<PendingRequest*> order;
  order.reserve(keyed.size());
  for (const auto& [key, p] : keyed) order.push_back(p);
  return order;
}

bool Scheduler::TakeTurn(PendingRequest& p, CycleState& cycle) {
  const int64_t now_s = cycle.now_s;
  // Its own claim must not count against it; it is made again below if it still waits.
  const std::string claimed_group = p.claimed_group;
  DropClaim(p);
  Turn turn{.p = p, .groups = QuotaPreFilter(p), .backfill = BackfillOf(p.request, now_s)};
  // The guarantee holds while the request fits its team's nominal quota; the team's own other
  // work can take that room again, and then the clock stops.
  if (!WithinNominal(p)) {
    p.guaranteed_since_s.reset();
  } else if (!p.guaranteed_since_s.has_value()) {
    p.guaranteed_since_s = now_s;
  }
  if (p.victims_pending) {
    bool held_room = false;  // given back for this turn
    if (std::optional<std::pair<const GroupCheck*, std::vector<int>>> placed = PlaceWithHold(turn, now_s, held_room)) {
      held_room |= GiveBackHold(p);
      // Placed on its plan's GPUs, it takes exactly what it held; elsewhere, that room is free again.
      const bool room_returns = held_room && placed->second != p.planned;
      Grant(p, *placed->first->group, placed->second, placed->first->quota.borrowing, cycle);
      if (room_returns) memo_.CapacityGrew();
      return true;
    }
    if (held_room) TopUpHold(p);  // takes back what it gave (nothing else ran meanwhile)
    if (VictimsStillRunning(p.request.id)) {
      p.reason = WaitReason::kWaitingForPreemption;
      if (!claimed_group.empty()) ClaimQuota(p, claimed_group);
      return false;
    }
    // The victims are gone and it still does not fit (the capacity went elsewhere or unhealthy):
    // it gives what it holds up, and is placed or plans again as any request.
    Unreserve(p);
  }
  if (auto placed = PlaceAcrossGroups(turn, now_s)) {
    Grant(p, *placed->first, placed->second, turn.groups.front().quota.borrowing, cycle);
    return true;
  }
  for (const GroupCheck& check : turn.groups) {
    if (!check.quota.fits) {
      if (turn.reason == WaitReason::kOverQuota) turn.reason = check.quota.reason;
      continue;
    }
    if (std::optional<std::vector<int>> gpus = PlaceInGroup(turn, check, now_s)) {
      Grant(p, *check.group, *gpus, check.quota.borrowing, cycle);
      return true;
    }
  }
  if (!PostFilter(turn, cycle)) p.reason = turn.reason;
  return false;
}

std::optional<std::pair<const Scheduler::GroupCheck*, std::vector<int>>> Scheduler::PlaceWithHold(Turn& turn,
                                                                                              int64_t now_s,
                                                                                              bool& held_room) {
  PendingRequest& p = turn.p;
  std::optional<std::pair<const GroupCheck*, std::vector<int>>> placed;
  const auto place_live = [&] {
    for (auto check = turn.groups.begin(); !placed && check != turn.groups.end(); ++check) {
      if (!check->quota.fits) continue;
      std::optional<std::vector<int>> gpus =
          PlaceLive(p, *check->group, {.ignore_gang_reservations = check->guaranteed, .now_s = now_s});
      if (gpus) placed = std::make_pair(&*check, *std::move(gpus));
    }
  };
  TopUpHold(p);  // room freed since its last turn by others than its victims
  if (!HoldComplete(p)) {
    place_live();  // room elsewhere may free first
    return placed;
  }
  if (std::none_of(turn.groups.begin(), turn.groups.end(),
                   [&](const GroupCheck& c) { return RestrictedBy(p, *c.group) != nullptr; })) {
    held_room = GiveBackHold(p);
    place_live();
  }
  // The plan's GPUs themselves (a gang's reservation made since does not take them).
  if (!placed) placed = PlaceOnHold(turn, now_s);
  return placed;
}

bool Scheduler::HoldComplete(const PendingRequest& p) {
  if (p.planned.empty()) return false;
  return std::all_of(p.holds.begin(), p.holds.end(), [](const Hold& h) { return h.lacking().empty(); });
}

std::optional<std::pair<const Scheduler::GroupCheck*, std::vector<int>>> Scheduler::PlaceOnHold(const Turn& turn,
                                                                                            int64_t now_s) const {
  const PendingRequest& p = turn.p;
  if (p.planned.empty()) return std::nullopt;
  const std::string& group = topology_.gpus()[p.planned.front()].group;
  for (const GroupCheck& check : turn.groups) {
    if (*check.group != group || !check.quota.fits) continue;
    // Its victims were stopped for this room: a gang's reservation made since (a prediction) does
    // not take it back.
    const PlacementOptions options{.ignore_gang_reservations = true, .now_s = now_s, .owner = p.handle};
    for (int g : p.planned) {
      if (!GpuOpenTo(state_, g, p.request, options)) return std::nullopt;  // drained since
    }
    return std::make_pair(&check, p.planned);
  }
  return std::nullopt;
}

std::vector<Scheduler::GroupCheck> Scheduler::QuotaPreFilter(const PendingRequest& p) const {
  const LeaseRequest& r = p.request;
  const bool preemptible = ClassOf(r).preemptible;
  std::vector<GroupCheck> checks;
  for (const auto& [group, unused] : p.eligibility->candidates) {
    QuotaCheck quota = ledger_.Check(r.team, group, RequestMilli(r, group), preemptible);
    checks.push_back({.group = &group, .quota = quota, .guaranteed = !ledger_.open_pool() && !quota.borrowing});
  }
  std::stable_sort(checks.begin(), checks.end(), [](const GroupCheck& a, const GroupCheck& b) {
    return a.quota.fits && !a.quota.borrowing && !(b.quota.fits && !b.quota.borrowing);
  });
  return checks;
}

std::optional<std::pair<const std::string*, std::vector<int>>> Scheduler::PlaceAcrossGroups(Turn& turn,
                                                                                          int64_t now_s) {
  const PendingRequest& p = turn.p;
  const std::vector<GroupCheck>& checks = turn.groups;
  // When every group would take the request alike (each fits its quota, all borrowing or none),
  // which model it gets is the placement's choice, not the quota's: the policy chooses among all
  // of them at once, as it does in the simulator.
  const bool groups_alike =
      checks.size() > 1 && !p.victims_pending && move_holds_.empty() &&
      std::all_of(checks.begin(), checks.end(), [&](const GroupCheck& c) {
        return c.quota.fits && c.quota.borrowing == checks.front().quota.borrowing;
      });
  if (!groups_alike) return std::nullopt;
  bool beside_any_reserve = false;
  for (const GroupCheck& c : checks) beside_any_reserve |= RestrictedBy(p, *c.group) != nullptr;
  // A shape that found no room across the groups since capacity last grew finds none again.
  const PlacementMemoKey key{.shape = p.shape, .backfill = turn.backfill, .across_groups = true,
                             .borrowing = checks.front().quota.borrowing,
                             .beside_reserve = beside_any_reserve};
  if (memo_.RecallPlacement(key).recall != DecisionMemo::Recall::kUnknown) return std::nullopt;
  PolicyAnswer answer =
      PolicyAcrossGroups(p, {.ignore_gang_reservations = checks.front().guaranteed, .now_s = now_s});
  if (!answer.answered) return std::nullopt;
  if (!answer.gpus) {
    memo_.RememberPlacementFailure(key, WaitReason::kNone);
    return std::nullopt;
  }
  const std::vector<int>& gpus = *answer.gpus;
  // One lease is charged to one group: a gang over a node whose GPUs are of two groups is placed
  // group by group instead.
  const std::string& group = topology_.gpus()[gpus.front()].group;
  for (int g : gpus) {
    if (topology_.gpus()[g].group != group) return std::nullopt;
  }
  // The policy sees no reserve: an answer that would take a reserve's spare GPUs is left to the
  // group-by-group placement, which honours it.
  if (const ReserveRule* rule = RestrictedBy(p, group);
      rule != nullptr && !LeavesReserve(state_, p.request, gpus, *rule, reserves_.SpareNow(*rule))) {
    return std::nullopt;
  }
  const auto it = std::find_if(checks.begin(), checks.end(), [&](const GroupCheck& c) { return *c.group == group; });
  return std::make_pair(it->group, gpus);
}

std::optional<std::vector<int>> Scheduler::PlaceInGroup(Turn& turn, const GroupCheck& check, int64_t now_s) {
  PendingRequest& p = turn.p;
  const std::string& group = *check.group;
  const PlacementOptions options{.ignore_gang_reservations = check.guaranteed, .now_s = now_s};
  // Work coming back from a move takes the room held for it (within its quota: checked above).
  if (!move_holds_.empty() && !p.victims_pending) {
    if (std::optional<std::vector<int>> gpus = PlaceOnMoveHold(p, group, options)) return gpus;
  }
  const auto note = [&](WaitReason why) {
    turn.reason = why;
    if (check.quota.borrowing || ledger_.open_pool()) return;
    if (why == WaitReason::kFragmented ||
        (why == WaitReason::kNoFreeCapacity &&
         victims_.AnyCandidate(group, p.request.team, /*guaranteed=*/true, std::numeric_limits<int>::min()))) {
      turn.short_of_room.push_back(check.group);
    }
  };
  // A request shaped like one that failed since capacity last grew fails too: skip the search.
  // Not while its victims stop: the GPUs they leave are reserved for it alone.
  const std::optional<PlacementMemoKey> key =
      p.victims_pending ? std::nullopt
                        : std::optional<PlacementMemoKey>({.shape = p.shape, .backfill = turn.backfill,
                                                           .group = group, .borrowing = check.quota.borrowing,
                                                           .beside_reserve = RestrictedBy(p, group) != nullptr});
  if (key) {
    DecisionMemo::PlacementRecall known = memo_.RecallPlacement(*key);
    if (known.recall == DecisionMemo::Recall::kShrunk) {
      // Capacity has only shrunk since: every placement question DiagnoseWait asks first, with
      // reservations ignored, failed then and fails now. A request found without room keeps that
      // finding, and only the free room against its need (the last question, cheap) is asked
      // again: at 100k GPUs the full diagnosis, after every grant of a cycle, was the cost of
      // most unplaceable decisions.
      const bool room_only = known.reason == WaitReason::kFragmented || known.reason == WaitReason::kNoFreeCapacity;
      known.reason = room_only ? RoomWait(p, group) : DiagnoseWait(p, group, now_s);
      memo_.RememberPlacementFailure(*key, known.reason);
    }
    if (known.recall != DecisionMemo::Recall::kUnknown) {
      note(known.reason);
      return std::nullopt;
    }
  }
  if (std::optional<std::vector<int>> gpus = PlaceLive(p, group, options)) return gpus;
  const WaitReason why = DiagnoseWait(p, group, now_s);
  note(why);
  if (key) memo_.RememberPlacementFailure(*key, why);
  return std::nullopt;
}

void Scheduler::Grant(PendingRequest& p, const std::string& group, const std::vector<int>& gpus,
                      bool borrowing, CycleState& cycle) {
  const int64_t now_s = cycle.now_s;
  Lease lease;
  lease.id = absl::StrCat(p.request.id, "#", p.handle);
  lease.request = p.request;
  lease.group = group;
  lease.borrowing = borrowing;
  lease.started_s = now_s;
  lease.last_checkpoint_s = now_s;
  if (p.guaranteed_since_s.has_value()) lease.guaranteed_wait_s = now_s - *p.guaranteed_since_s;
  for (int g : gpus) {
    state_.Take(g, p.request.slot);
    lease.gpus.push_back(topology_.gpus()[g].ref);
    lease.milli += SlotComputeMilli(p.request.slot, topology_.gpus()[g].model);
  }
  RefreshGpus(gpus);
  ledger_.Add(p.request.team, group, lease.milli);
  if (borrowing) memo_.BorrowingAdmitted();
  DropGangReservation(p.handle);
  p.holds.clear();  // given back just before (TakeTurn)
  p.planned.clear();
  cycle.result.granted.push_back(lease.id);
  const Lease& held = leases_[lease.id] = std::move(lease);
  victims_.Add(held, ClassOf(held.request));
}

void Scheduler::ClaimQuota(PendingRequest& p, const std::string& group) {
  DropClaim(p);
  p.claimed_group = group;
  p.claimed_milli = RequestMilli(p.request, group);
  ledger_.Claim(p.request.team, group, p.claimed_milli);
}

void Scheduler::DropClaim(PendingRequest& p) {
  if (p.claimed_milli == 0) return;
  ledger_.Unclaim(p.request.team, p.claimed_group, p.claimed_milli);
  p.claimed_milli = 0;
  p.claimed_group.clear();
}

void Scheduler::Unreserve(PendingRequest& p) {
  if (GiveBackHold(p)) memo_.CapacityGrew();
  p.holds.clear();
  p.planned.clear();
  p.victims_pending = false;
  DropGangReservation(p.handle);
  DropClaim(p);
}

void Scheduler::DropGangReservation(uint64_t handle) {
  std::vector<int> cleared;
  for (int g : gang_reserved_gpus_) {
    if (state_[g].gang_reserved_for == handle) {
      state_[g].gang_reserved_for = 0;
      cleared.push_back(g);
    }
  }
  if (cleared.empty()) return;
  RefreshGpus(cleared);
  memo_.CapacityGrew();
}

bool Scheduler::WithinNominal(const PendingRequest& p) const {
  // An open pool, with no teams configured, guarantees nothing: everyone shares.
  if (ledger_.open_pool()) return false;
  if (p.claimed_milli > 0) return true;  // its claim is its room within nominal
  for (const auto& [group, unused] : p.eligibility->candidates) {
    if (ledger_.FitsNominal(p.request.team, group, RequestMilli(p.request, group))) return true;
  }
  return false;
}

void Scheduler::ReserveForGang(PendingRequest& p, int64_t now_s) {
  // Predict when running leases end (revoked ones at their deadline) and when the room held for
  // requests waiting for their victims frees (as if they started now; their victims' room is
  // theirs until then), free them in that order on a copy, and stop at the first moment the gang
  // fits.
  struct End {
    int64_t at_s;
    const std::string* id;  // the order among equal times
    const Lease* lease;             // a lease ends, or ...
    const PendingRequest* holder;   // ... the room held for a request
  };
  std::vector<End> ends;
  std::map<std::string, std::vector<const Lease*>> handed_over;  // holder's id -> its victims
  for (const auto& [id, lease] : leases_) {
    if (auto holder = pending_.find(lease.revoked_for); lease.revoke_deadline_s.has_value() &&
                                                        holder != pending_.end() && !holder->second.holds.empty()) {
      handed_over[lease.revoked_for].push_back(&lease);
      continue;
    }
    int64_t end = lease.revoke_deadline_s.has_value()
                      ? *lease.revoke_deadline_s
                      : lease.started_s + lease.request.runtime_estimate_s.value_or(options_.default_runtime_s);
    ends.push_back({std::max(end, now_s), &lease.id, &lease, nullptr});
  }
  for (const auto& [id, held_for] : pending_) {
    if (held_for.holds.empty()) continue;
    ends.push_back({now_s + held_for.request.runtime_estimate_s.value_or(options_.default_runtime_s), &id, nullptr,
                    &held_for});
  }
  std::sort(ends.begin(), ends.end(), [](const End& a, const End& b) {
    return a.at_s != b.at_s ? a.at_s < b.at_s : *a.id < *b.id;
  });
  const Eligibility& e = *p.eligibility;
  CapacityState future = state_;
  for (const End& ending : ends) {
    const int64_t end = ending.at_s;
    if (ending.lease != nullptr) {
      GiveBack(*ending.lease, future);
    } else {
      for (const Hold& h : ending.holder->holds) future.GiveShare(h.gpu, h.held);
      for (const Lease* victim : handed_over[*ending.id]) GiveBack(*victim, future);
    }
    for (const auto& [group, candidates] : e.candidates) {
      std::optional<std::vector<int>> gpus = Place(p, candidates, future, {.ignore_reservations = true});
      if (!gpus) continue;
      for (int g : *gpus) {
        if (state_[g].gang_reserved_for != 0) continue;
        state_[g].gang_reserved_for = p.handle;
        state_[g].gang_reserved_until_s = end;
      }
      RefreshGpus(*gpus);
      p.reserved_start_s = end;
      return;
    }
  }
}

void Scheduler::EndCycle(CycleState& cycle) {
  for (const std::string& id : cycle.admitted) pending_.erase(id);
  RefillReserves(cycle.now_s, cycle.result);
  // A gang reservation gone (granted, or moved to other GPUs) opens room for movers.
  for (int g : cycle.gang_reserved_before) {
    if (gang_reserved_gpus_.count(g) == 0) {
      memo_.GangReservationDropped();
      break;
    }
  }
}

}  // namespace gpupool::pool
