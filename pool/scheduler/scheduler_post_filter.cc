// The Scheduler's post-filter stage: when a request fits nowhere as the pool stands, the planners
// that make room for it. Reclaim and priority preemption (preemption_planner.h) revoke leases;
// defragmentation (move_planner.h) moves leases that fit elsewhere now and holds the room they
// will take again. A request they plan for waits with the reason kWaitingForPreemption, holding
// the room its plan places it on (Hold) and its quota (a claim) until they are gone.
#include <algorithm>
#include <functional>

#include "pool/scheduler/move_planner.h"
#include "pool/scheduler/preemption_planner.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {

bool Scheduler::PostFilter(Turn& turn, CycleState& cycle) {
  PendingRequest& p = turn.p;
  for (const GroupCheck& check : turn.groups) {
    if (check.quota.fits) {
      if (TryPreempt(p, *check.group, !check.quota.borrowing, 0, turn.backfill, cycle)) return true;
      continue;
    }
    // Over the team's own quota: preempting its lower-priority work may bring it back within
    // nominal, where it is guaranteed.
    const std::string& group = *check.group;
    const int64_t beyond = ledger_.Usage(p.request.team, group) + RequestMilli(p.request, group) -
                           ledger_.Nominal(p.request.team, group);
    if (!ledger_.open_pool() && beyond > 0 && TryPreempt(p, group, true, beyond, turn.backfill, cycle)) {
      return true;
    }
  }
  // Guaranteed, and neither reclaiming nor preempting alone makes room: move leases that fit
  // elsewhere now, with borrowed capacity reclaimed where it helps.
  for (const std::string* group : turn.short_of_room) {
    if (TryMove(p, *group, turn.backfill, cycle)) return true;
  }
  return false;
}

// Candidates: borrowed leases of other teams in this group when `guaranteed` (reclaim), and
// strictly lower-priority leases of p's own team (priority), as the victim census indexes them.
bool Scheduler::TryPreempt(PendingRequest& p, const std::string& group, bool guaranteed,
                           int64_t own_quota_to_free, const BackfillSet& backfill, CycleState& cycle) {
  const int64_t now_s = cycle.now_s;
  const PriorityClass& mine = ClassOf(p.request);
  // The common case, a pool full of work this request may not preempt, at once.
  if (!victims_.AnyCandidate(group, p.request.team, guaranteed, mine.value)) return false;
  const PreemptionMemoKey memo_key{.shape = p.shape, .backfill = backfill, .group = group,
                                   .team = p.request.team, .priority = mine.value,
                                   .guaranteed = guaranteed, .own_quota_to_free = own_quota_to_free};
  if (memo_.PreemptionFailed(memo_key)) return false;
  // Urgent work a spare reserve admitted beyond its quota is reclaimed last (spare_reserve.h).
  const ReserveRule* reserve = reserves_.For(group);
  // Each candidate victim with its GPU positions, found once: a plan asks about log2(n) + k
  // questions of them. `candidates` is the same list as the planner weighs it.
  struct Victim {
    const Lease* lease;
    RevokeCause cause;
    std::vector<int> positions;
  };
  std::vector<Victim> victims;
  std::vector<PreemptionCandidate> candidates;
  victims_.ForEachCandidate(group, p.request.team, guaranteed, mine.value, [&](const Lease& lease, RevokeCause cause) {
    Victim& v = victims.emplace_back(Victim{&lease, cause, {}});
    for (const GpuRef& ref : lease.gpus) v.positions.push_back(topology_.Find(ref));
    candidates.push_back(
        {.cost = static_cast<double>(lease.milli) * static_cast<double>(now_s - lease.last_checkpoint_s),
         .gpus = lease.gpus.size(),
         .id = lease.id,
         .last = reserve != nullptr && cause == RevokeCause::kReclaim &&
                 ClassOf(lease.request).value >= reserve->min_priority,
         .own_milli = lease.request.team == p.request.team ? lease.milli : 0});
  });
  // Only GPUs with room now or held by a candidate victim can take the request (and, for gang
  // topologies, their nodes): searching the rest of a full pool is wasted work.
  const std::vector<int>& eligible = p.eligibility->candidates.at(group);
  std::vector<char> relevant_node(topology_.nodes().size(), 0);
  for (int g : eligible) {
    if (state_[g].compute_free_milli > 0) relevant_node[topology_.gpus()[g].node] = 1;
  }
  for (const Victim& v : victims) {
    for (int g : v.positions) relevant_node[topology_.gpus()[g].node] = 1;
  }
  std::vector<int> gpus;
  for (int g : eligible) {
    if (relevant_node[topology_.gpus()[g].node]) gpus.push_back(g);
  }
  // What if these victims were gone? A guaranteed request is not held back by gang reservations.
  // One copy of the state serves every question: each gives its victims back, asks, and takes
  // them again (Give and Take are exact inverses). A copy per question was most of the cost of
  // a plan at 100k GPUs.
  CapacityState trial = state_;
  const auto fits = [&](const std::vector<size_t>& freed) {
    const auto move = [&](bool give) {
      for (size_t i : freed) {
        const SlotShape& slot = victims[i].lease->request.slot;
        for (int g : victims[i].positions) give ? trial.Give(g, slot) : trial.Take(g, slot);
      }
    };
    move(true);
    const bool fit =
        PlaceHonouringReserve(p, group, gpus, trial, {.ignore_gang_reservations = guaranteed, .now_s = now_s})
            .has_value();
    move(false);
    return fit;
  };
  std::optional<std::vector<size_t>> chosen = PlanPreemption(candidates, own_quota_to_free, fits);
  if (!chosen) {
    memo_.RememberPreemptionFailure(memo_key);
    return false;
  }
  // Where it goes once they are gone (the question `fits` answered yes to), to hold that room.
  for (size_t i : *chosen) {
    for (int g : victims[i].positions) trial.Give(g, victims[i].lease->request.slot);
  }
  const std::optional<std::vector<int>> planned =
      PlaceHonouringReserve(p, group, gpus, trial, {.ignore_gang_reservations = guaranteed, .now_s = now_s});
  for (size_t i : *chosen) RevokeFor(p, leases_.at(victims[i].lease->id), victims[i].cause, cycle);
  if (planned) HoldPlannedRoom(p, *planned);
  p.victims_pending = true;
  p.reason = WaitReason::kWaitingForPreemption;
  if (guaranteed) ClaimQuota(p, group);
  return true;
}

void Scheduler::RevokeFor(PendingRequest& p, Lease& victim, RevokeCause cause, CycleState& cycle) {
  cycle.result.revoked.push_back(Revoke(victim, cause, p.request.id, cycle.now_s));
}

void Scheduler::HoldPlannedRoom(PendingRequest& p, const std::vector<int>& planned) {
  p.holds.clear();
  p.planned = planned;
  for (int g : planned) {
    auto it = std::find_if(p.holds.begin(), p.holds.end(), [&](const Hold& h) { return h.gpu == g; });
    if (it == p.holds.end()) it = p.holds.insert(p.holds.end(), Hold{.gpu = g});
    it->need += state_.ShareOf(g, p.request.slot);
  }
  TopUpHold(p);
}

void Scheduler::TopUpHold(PendingRequest& p) {
  std::vector<int> changed;
  for (Hold& h : p.holds) {
    const Share take = state_.FreePart(h.gpu, h.lacking());
    if (take.empty()) continue;
    state_.TakeShare(h.gpu, take);
    h.held += take;
    changed.push_back(h.gpu);
  }
  if (!changed.empty()) RefreshGpus(changed);
}

bool Scheduler::GiveBackHold(PendingRequest& p) {
  std::vector<int> changed;
  for (Hold& h : p.holds) {
    if (h.held.empty()) continue;
    state_.GiveShare(h.gpu, h.held);
    h.held = {};
    changed.push_back(h.gpu);
  }
  if (changed.empty()) return false;
  RefreshGpus(changed);
  return true;
}

bool Scheduler::TryMove(PendingRequest& p, const std::string& group, const BackfillSet& backfill,
                        CycleState& cycle) {
  if (!options_.move_for_guarantees) return false;
  const int64_t now_s = cycle.now_s;
  const ReserveRule* reserve = RestrictedBy(p, group);
  const MoveMemoKey memo_key{.shape = p.shape, .backfill = backfill, .group = group,
                             .team = p.request.team, .beside_reserve = reserve != nullptr};
  if (memo_.MoveFailed(memo_key, now_s)) return false;
  std::vector<MoveCandidate> movable;
  std::vector<Lease*> movers;
  int64_t next_movable_s = now_s + options_.min_run_before_move_s;  // the soonest one too young now
  for (auto& [id, lease] : leases_) {
    if (lease.revoke_deadline_s.has_value() || lease.group != group || lease.gpus.size() != 1 ||
        !ClassOf(lease.request).preemptible) {
      continue;
    }
    // Another team's borrowed capacity: the guarantee takes it back, however young. Any other
    // lease moves, once it has run long enough, to GPUs its own constraints allow.
    const bool reclaim = lease.borrowing && lease.request.team != p.request.team;
    const std::vector<int>* destinations = nullptr;
    if (!reclaim) {
      if (now_s - lease.started_s < options_.min_run_before_move_s) {
        next_movable_s = std::min(next_movable_s, lease.started_s + options_.min_run_before_move_s);
        continue;
      }
      const Eligibility& e = EligibilityOf(lease.request);
      auto it = e.candidates.find(group);
      if (it == e.candidates.end()) continue;
      destinations = &it->second;
    }
    movable.push_back({.gpu = topology_.Find(lease.gpus[0]), .request = &lease.request,
                       .destinations = destinations, .cost = WorkAtRisk(lease, now_s),
                       .reclaim = reclaim});
    movers.push_back(&lease);
  }
  // Beside a reserve that binds the request, neither it nor the movers may land on the reserve.
  std::optional<CapacityState> without_reserve;
  if (reserve != nullptr && !movable.empty()) without_reserve = WithoutReserve(*reserve);
  std::optional<MovePlan> plan =
      movable.empty() ? std::nullopt
                      : PlanMoves(topology_, without_reserve ? *without_reserve : state_, p.request,
                                  p.eligibility->candidates.at(group), movable,
                                  {.ignore_gang_reservations = true, .now_s = now_s, .owner = p.handle});
  if (!plan) {
    memo_.RememberMoveFailure(memo_key, next_movable_s);
    return false;
  }
  std::vector<int> held;
  for (size_t k = 0; k < plan->moved.size(); ++k) {
    Lease& mover = *movers[plan->moved[k]];
    if (movable[plan->moved[k]].reclaim) {
      RevokeFor(p, mover, RevokeCause::kReclaim, cycle);
      continue;
    }
    RevokeFor(p, mover, RevokeCause::kMove, cycle);
    // Hold the room the plan found for the mover's work, so that no other plan counts on it and
    // no other request takes it while the mover stops and asks again.
    const int to = plan->destinations[k];
    // The plan gave back the movers' whole slots, host shares included; a destination on a
    // mover's own node may count on host capacity the mover holds until it stops. Such room is
    // not held: the mover asks again and is placed wherever it fits then.
    if (!state_.Fits(to, mover.request.slot)) continue;
    held.push_back(to);
    state_.Take(to, mover.request.slot);
    move_holds_.push_back({.gpu = to, .slot = mover.request.slot, .team = mover.request.team,
                           .shape = ShapeOf(mover.request), .group = group,
                           .until_s = *mover.revoke_deadline_s + options_.move_hold_s});
  }
  RefreshGpus(held);
  HoldPlannedRoom(p, plan->gpus);
  p.victims_pending = true;
  p.reason = WaitReason::kWaitingForPreemption;
  ClaimQuota(p, group);
  return true;
}

std::optional<std::vector<int>> Scheduler::PlaceOnMoveHold(const PendingRequest& p,
                                                           const std::string& group,
                                                           PlacementOptions options) {
  for (size_t i = 0; i < move_holds_.size(); ++i) {
    const MoveHold& h = move_holds_[i];
    if (h.team != p.request.team || h.shape != p.shape || h.group != group) continue;
    // Offer the held room (placement may still choose better room elsewhere); keep holding it
    // if the request cannot be placed at all.
    state_.Give(h.gpu, h.slot);
    RefreshGpus({h.gpu});
    std::optional<std::vector<int>> gpus = PlaceLive(p, group, options);
    if (gpus) {
      const int held = h.gpu;
      move_holds_.erase(move_holds_.begin() + static_cast<std::ptrdiff_t>(i));
      // Placed elsewhere: the held room stays free, which memoised failures must hear of.
      if (std::find(gpus->begin(), gpus->end(), held) == gpus->end()) memo_.CapacityGrew();
    } else {
      state_.Take(h.gpu, h.slot);
      RefreshGpus({h.gpu});
    }
    return gpus;
  }
  return std::nullopt;
}

void Scheduler::ReleaseMoveHold(size_t index) {
  const int g = move_holds_[index].gpu;
  state_.Give(g, move_holds_[index].slot);
  move_holds_.erase(move_holds_.begin() + static_cast<std::ptrdiff_t>(index));
  RefreshGpus({g});
  memo_.CapacityGrew();
}

}  // namespace gpupool::pool
