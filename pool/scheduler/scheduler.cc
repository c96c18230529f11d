#include "pool/scheduler/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/scheduler/placement.h"

namespace gpupool::pool {
namespace {

constexpr absl::string_view kDefaultClass = "training";

}  // namespace

absl::string_view RevokeCauseName(RevokeCause cause) {
  switch (cause) {
    case RevokeCause::kReclaim: return "reclaim";
    case RevokeCause::kPriority: return "priority";
    case RevokeCause::kDrain: return "drain";
  }
  return "unknown";
}

Scheduler::Scheduler(const Inventory& inventory, const SchedulingConfig& config,
                     SchedulerOptions options)
    : config_(&config),
      options_(options),
      capacity_(inventory, config),
      ledger_(config, capacity_.GroupCapacityMilli()) {}

const PriorityClass& Scheduler::ClassOf(const LeaseRequest& r) const {
  const PriorityClass* c =
      config_->FindClass(r.priority_class.empty() ? kDefaultClass : r.priority_class);
  return c != nullptr ? *c : config_->priority_classes.front();  // Validate guarantees c
}

// Quota groups holding at least one GPU the request could use, in a stable order.
std::vector<std::string> Scheduler::CandidateGroups(const LeaseRequest& r) const {
  std::set<std::string> groups;
  for (const GpuCapacity& c : capacity_.gpus()) {
    if (GpuMatches(c, r, c.group)) groups.insert(c.group);
  }
  return {groups.begin(), groups.end()};
}

absl::Status Scheduler::Validate(const LeaseRequest& r) const {
  if (r.id.empty()) return absl::InvalidArgumentError("request id is empty");
  if (r.team.empty()) return absl::InvalidArgumentError("request has no team");
  if (!ledger_.open_pool() && config_->FindTeam(r.team) == nullptr) {
    std::vector<std::string> names;
    for (const Team& t : config_->teams) names.push_back(t.name);
    return absl::InvalidArgumentError(absl::StrCat("unknown team '", r.team, "' (teams: ",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  std::string class_name = r.priority_class.empty() ? std::string(kDefaultClass) : r.priority_class;
  if (config_->FindClass(class_name) == nullptr) {
    std::vector<std::string> names;
    for (const PriorityClass& c : config_->priority_classes) names.push_back(c.name);
    return absl::InvalidArgumentError(absl::StrCat("unknown priority class '", class_name,
                                                   "' (classes: ", absl::StrJoin(names, ", "), ")"));
  }
  if (r.slot_count < 1 || r.slot_count > kMaxSlotsPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("slot count ", r.slot_count, " is outside 1..",
                                                   kMaxSlotsPerRequest));
  }
  for (const std::string& m : r.allowed_models) {
    if (FindGpuModel(m) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown GPU model '", m, "' (known: ",
                                                     KnownGpuModelNames(), ")"));
    }
  }
  if (r.min_gpu_memory_mib < 0) {
    return absl::InvalidArgumentError("minimum GPU memory cannot be negative");
  }
  switch (r.slot.kind) {
    case SlotKind::kWholeGpu:
      break;
    case SlotKind::kFraction:
      if (r.hardware_isolation) {
        return absl::InvalidArgumentError(
            "hardware isolation needs MIG or whole GPUs; fractions share memory and faults");
      }
      if (r.slot.compute_milli < 1 || r.slot.compute_milli > 1000 ||
          r.slot.memory_mib < kMinFractionMemoryMib) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fraction needs a compute share in 1..1000 milli-GPU and at least ",
            kMinFractionMemoryMib, " MiB of memory (got ", r.slot.ToString(), ")"));
      }
      break;
    case SlotKind::kMig:
    case SlotKind::kMps:
      return absl::UnimplementedError(absl::StrCat(
          "the scheduler does not place ", SlotKindName(r.slot.kind),
          " slots yet; ask for whole GPUs or fractions"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Scheduler::Submit(LeaseRequest r, int64_t now_s) {
  if (absl::Status s = Validate(r); !s.ok()) return s;
  if (pending_.contains(r.id)) {
    return absl::AlreadyExistsError(absl::StrCat("request '", r.id, "' is already pending"));
  }
  // Never queue what can never run: it must fit the empty pool, ignoring health (a drained GPU
  // comes back) but not the hardware or the team's quota.
  std::vector<std::string> groups = CandidateGroups(r);
  if (groups.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", r.id, "' matches no GPU in the pool (models, labels, memory or NVLink)"));
  }
  Capacity empty = capacity_;
  for (GpuCapacity& c : empty.gpus()) {
    c.compute_free_milli = 1000;
    c.memory_free_mib = c.memory_total_mib;
    c.reserved_for.clear();
  }
  bool fits_hardware = false;
  for (const std::string& g : groups) {
    fits_hardware = fits_hardware || PlaceRequest(empty, r, g, {.ignore_health = true}).has_value();
  }
  if (!fits_hardware) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", r.id, "' for ", r.slot_count, " x ", r.slot.ToString(), " (",
        GangTopologyName(r.topology), ") does not fit even in the empty pool"));
  }
  const PriorityClass& pc = ClassOf(r);
  const GpuModel* model = nullptr;
  for (const GpuCapacity& c : capacity_.gpus()) {
    if (c.model != nullptr && GpuMatches(c, r, c.group)) model = c.model;
  }
  int64_t milli = model == nullptr ? 0 : SlotMilli(r.slot, *model) * r.slot_count;
  if (!ledger_.EverFits(r.team, milli, pc.preemptible)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", r.id, "' needs ", milli / 1000.0, " GPUs, more than team '", r.team,
        "' may ever hold", pc.preemptible ? "" : " (a non-preemptible class never borrows)"));
  }
  std::string id = r.id;
  pending_[id] = PendingRequest{std::move(r), now_s, next_sequence_++, WaitReason::kNone, false};
  return id;
}

absl::Status Scheduler::Cancel(const std::string& request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) {
    return absl::NotFoundError(absl::StrCat("no pending request '", request_id, "'"));
  }
  ClearReservations(request_id);
  pending_.erase(it);
  return absl::OkStatus();
}

bool Scheduler::VictimsStillRunning(const std::string& request_id) const {
  for (const auto& [id, lease] : leases_) {
    if (lease.revoke_deadline_s.has_value() && lease.revoked_for == request_id) return true;
  }
  return false;
}

void Scheduler::ClearReservations(const std::string& request_id) {
  for (GpuCapacity& c : capacity_.gpus()) {
    if (c.reserved_for == request_id) c.reserved_for.clear();
    if (c.gang_reserved_for == request_id) c.gang_reserved_for.clear();
  }
}

void Scheduler::ReserveForGang(PendingRequest& p, int64_t now_s) {
  // Predict when running leases end (revoked ones at their deadline), free them in that order on
  // a copy, and stop at the first moment the gang fits.
  std::vector<std::pair<int64_t, const Lease*>> ends;
  for (const auto& [id, lease] : leases_) {
    int64_t end = lease.revoke_deadline_s.has_value()
                      ? *lease.revoke_deadline_s
                      : lease.started_s + lease.request.runtime_estimate_s.value_or(options_.default_runtime_s);
    ends.emplace_back(std::max(end, now_s), &lease);
  }
  std::sort(ends.begin(), ends.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->id < b.second->id;
  });
  Capacity future = capacity_;
  for (const auto& [end, lease] : ends) {
    for (const GpuRef& ref : lease->gpus) future.Give(future.Find(ref), lease->request.slot);
    for (const std::string& group : CandidateGroups(p.request)) {
      std::optional<std::vector<int>> gpus = PlaceRequest(future, p.request, group, {.ignore_reservations = true});
      if (!gpus) continue;
      for (int g : *gpus) {
        GpuCapacity& c = capacity_.gpus()[g];
        if (!c.gang_reserved_for.empty()) continue;
        c.gang_reserved_for = p.request.id;
        c.gang_reserved_until_s = end;
      }
      p.reserved_start_s = end;
      return;
    }
  }
}

void Scheduler::ReleaseLease(std::map<std::string, Lease>::iterator it) {
  const Lease& lease = it->second;
  for (const GpuRef& ref : lease.gpus) capacity_.Give(capacity_.Find(ref), lease.request.slot);
  ledger_.Remove(lease.request.team, lease.group, lease.milli);
  leases_.erase(it);
}

absl::Status Scheduler::Release(const std::string& lease_id, int64_t now_s) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return absl::NotFoundError(absl::StrCat("no lease '", lease_id, "'"));
  ReleaseLease(it);
  return absl::OkStatus();
}

absl::Status Scheduler::RecordCheckpoint(const std::string& lease_id, int64_t now_s) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return absl::NotFoundError(absl::StrCat("no lease '", lease_id, "'"));
  it->second.last_checkpoint_s = std::max(it->second.last_checkpoint_s, now_s);
  return absl::OkStatus();
}

Revocation Scheduler::Revoke(Lease& lease, RevokeCause cause, const std::string& for_request,
                             int64_t now_s) {
  const PriorityClass& pc = ClassOf(lease.request);
  lease.revoke_deadline_s = now_s + pc.grace_period_s;
  lease.revoked_for = for_request;
  double at_risk = static_cast<double>(lease.milli) / 1000.0 *
                   static_cast<double>(now_s - lease.last_checkpoint_s);
  return Revocation{lease.id, cause, *lease.revoke_deadline_s, for_request, at_risk};
}

CycleResult Scheduler::SetGpuHealth(const GpuRef& ref, HealthState state, int64_t now_s) {
  CycleResult result;
  int g = capacity_.Find(ref);
  if (g < 0) return result;
  bool schedulable = state == HealthState::kHealthy || state == HealthState::kDegraded;
  capacity_.gpus()[g].schedulable = schedulable;
  if (schedulable) return result;
  std::vector<std::string> lost;
  for (auto& [id, lease] : leases_) {
    if (std::find(lease.gpus.begin(), lease.gpus.end(), ref) == lease.gpus.end()) continue;
    if (state == HealthState::kLost) {
      lost.push_back(id);
    } else if (!lease.revoke_deadline_s.has_value()) {
      result.revoked.push_back(Revoke(lease, RevokeCause::kDrain, "", now_s));
    }
  }
  for (const std::string& id : lost) {
    ReleaseLease(leases_.find(id));
    result.expired.push_back(id);
  }
  return result;
}

void Scheduler::Grant(PendingRequest& p, const std::string& group, const std::vector<int>& gpus,
                      bool borrowing, int64_t now_s, CycleResult& result) {
  Lease lease;
  lease.id = absl::StrCat(p.request.id, "#", p.sequence);
  lease.request = p.request;
  lease.group = group;
  lease.borrowing = borrowing;
  lease.started_s = now_s;
  lease.last_checkpoint_s = now_s;
  for (int g : gpus) {
    capacity_.Take(g, p.request.slot);
    lease.gpus.push_back(capacity_.gpus()[g].ref);
    lease.milli += SlotMilli(p.request.slot, *capacity_.gpus()[g].model);
  }
  ledger_.Add(p.request.team, group, lease.milli);
  ClearReservations(p.request.id);
  result.granted.push_back(lease.id);
  leases_[lease.id] = std::move(lease);
}

WaitReason Scheduler::DiagnoseWait(const PendingRequest& p, const std::string& group) const {
  const LeaseRequest& r = p.request;
  if (PlaceRequest(capacity_, r, group, {.ignore_reservations = true})) {
    Capacity without_gangs = capacity_;
    for (GpuCapacity& c : without_gangs.gpus()) c.gang_reserved_for.clear();
    return PlaceRequest(without_gangs, r, group) ? WaitReason::kGangReservation
                                                 : WaitReason::kBehindHigherPriority;
  }
  if (PlaceRequest(capacity_, r, group, {.ignore_health = true, .ignore_reservations = true})) {
    return WaitReason::kUnhealthyCapacity;
  }
  // Enough free compute among matching healthy GPUs, but not in the shape the topology needs?
  int64_t free = 0;
  for (const GpuCapacity& c : capacity_.gpus()) {
    if (c.schedulable && GpuMatches(c, r, group)) free += c.compute_free_milli;
  }
  int64_t need = 0;
  for (int i = 0; i < r.slot_count; ++i) {
    need += r.slot.kind == SlotKind::kWholeGpu ? 1000 : r.slot.compute_milli;
  }
  return free >= need ? WaitReason::kFragmented : WaitReason::kNoFreeCapacity;
}

// Chooses victims among running leases so that `p` fits in `group`, and revokes them. Candidates:
// leases of teams borrowing in this group when `guaranteed` (reclaim), and strictly
// lower-priority leases of p's own team. When the team's own quota is what blocks the request,
// its own lower-priority victims must free at least `own_quota_to_free` milli-GPUs. Victims are
// added cheapest first (GPU-seconds since their last checkpoint, then fewest victims) until the
// request fits, then any victim that turns out unnecessary is dropped again, most expensive first.
bool Scheduler::TryPreempt(PendingRequest& p, const std::string& group, bool guaranteed,
                           int64_t own_quota_to_free, int64_t now_s, CycleResult& result) {
  const PriorityClass& mine = ClassOf(p.request);
  struct Candidate {
    double cost;
    RevokeCause cause;
    std::string lease_id;
  };
  std::vector<Candidate> candidates;
  for (const auto& [id, lease] : leases_) {
    if (lease.revoke_deadline_s.has_value() || lease.group != group) continue;
    const PriorityClass& theirs = ClassOf(lease.request);
    if (!theirs.preemptible) continue;
    std::optional<RevokeCause> cause;
    if (guaranteed && lease.request.team != p.request.team && lease.borrowing) {
      cause = RevokeCause::kReclaim;
    } else if (lease.request.team == p.request.team && theirs.value < mine.value) {
      cause = RevokeCause::kPriority;
    }
    if (!cause) continue;
    double cost = static_cast<double>(lease.milli) * static_cast<double>(now_s - lease.last_checkpoint_s);
    candidates.push_back({cost, *cause, id});
  }
  std::sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    size_t ga = leases_.at(a.lease_id).gpus.size(), gb = leases_.at(b.lease_id).gpus.size();
    if (ga != gb) return ga > gb;  // fewer victims: prefer freeing more per victim
    return a.lease_id < b.lease_id;
  });

  // "What if" on a copy of the capacity.
  Capacity trial = capacity_;
  auto give = [&](Capacity& cap, const Lease& lease) {
    for (const GpuRef& ref : lease.gpus) cap.Give(cap.Find(ref), lease.request.slot);
  };
  auto own_freed = [&](const std::vector<size_t>& set, size_t skip) {
    int64_t freed = 0;
    for (size_t j : set) {
      const Lease& l = leases_.at(candidates[j].lease_id);
      if (j != skip && l.request.team == p.request.team) freed += l.milli;
    }
    return freed;
  };
  std::vector<size_t> chosen;
  bool enough = false;
  for (size_t i = 0; i < candidates.size() && !enough; ++i) {
    give(trial, leases_.at(candidates[i].lease_id));
    chosen.push_back(i);
    enough = own_freed(chosen, SIZE_MAX) >= own_quota_to_free &&
             PlaceRequest(trial, p.request, group, {.now_s = now_s}).has_value();
  }
  if (!enough) return false;
  for (size_t k = chosen.size(); k-- > 0;) {
    Capacity without = capacity_;
    for (size_t j : chosen) {
      if (j != chosen[k]) give(without, leases_.at(candidates[j].lease_id));
    }
    if (own_freed(chosen, chosen[k]) >= own_quota_to_free &&
        PlaceRequest(without, p.request, group, {.now_s = now_s})) {
      chosen.erase(chosen.begin() + static_cast<long>(k));
    }
  }
  for (size_t j : chosen) {
    Lease& victim = leases_.at(candidates[j].lease_id);
    for (const GpuRef& ref : victim.gpus) capacity_.gpus()[capacity_.Find(ref)].reserved_for = p.request.id;
    result.revoked.push_back(Revoke(victim, candidates[j].cause, p.request.id, now_s));
  }
  p.victims_pending = true;
  p.reason = WaitReason::kWaitingForPreemption;
  return true;
}

int64_t Scheduler::RequestMilli(const LeaseRequest& r, const std::string& group) const {
  for (const GpuCapacity& c : capacity_.gpus()) {
    if (c.group == group && c.model != nullptr) return SlotMilli(r.slot, *c.model) * r.slot_count;
  }
  return 1000LL * r.slot_count;
}

bool Scheduler::TryAdmit(PendingRequest& p, int64_t now_s, CycleResult& result) {
  const LeaseRequest& r = p.request;
  const PriorityClass& pc = ClassOf(r);
  std::vector<std::string> groups = CandidateGroups(r);
  // Guaranteed groups before borrowing ones: nominal quota is used first, as Kueue's flavor
  // fungibility does.
  std::vector<std::pair<std::string, QuotaCheck>> checks;
  for (const std::string& g : groups) {
    checks.emplace_back(g, ledger_.Check(r.team, g, RequestMilli(r, g), pc.preemptible));
  }
  std::stable_sort(checks.begin(), checks.end(), [](const auto& a, const auto& b) {
    return a.second.fits && !a.second.borrowing && !(b.second.fits && !b.second.borrowing);
  });
  WaitReason reason = WaitReason::kOverQuota;
  for (const auto& [group, check] : checks) {
    if (!check.fits) {
      if (reason == WaitReason::kOverQuota) reason = check.reason;
      continue;
    }
    if (std::optional<std::vector<int>> gpus = PlaceRequest(capacity_, r, group, {.now_s = now_s})) {
      Grant(p, group, *gpus, check.borrowing, now_s, result);
      return true;
    }
    reason = DiagnoseWait(p, group);
  }
  if (p.victims_pending) {
    if (VictimsStillRunning(r.id)) {
      p.reason = WaitReason::kWaitingForPreemption;
      return false;
    }
    // The victims are gone and it still does not fit (the capacity went elsewhere or unhealthy):
    // give the reservation up and plan again.
    p.victims_pending = false;
    ClearReservations(r.id);
  }
  for (const auto& [group, check] : checks) {
    if (check.fits) {
      if (TryPreempt(p, group, !check.borrowing, 0, now_s, result)) return false;
      continue;
    }
    // Over the team's own quota: preempting its lower-priority work may bring it back within
    // nominal, where it is guaranteed.
    int64_t beyond = ledger_.Usage(r.team, group) + RequestMilli(r, group) - ledger_.Nominal(r.team, group);
    if (!ledger_.open_pool() && beyond > 0 && TryPreempt(p, group, true, beyond, now_s, result)) return false;
  }
  p.reason = reason;
  return false;
}

CycleResult Scheduler::Schedule(int64_t now_s) {
  CycleResult result;
  // Revoked leases whose grace period is over are stopped now.
  std::vector<std::string> expired;
  for (const auto& [id, lease] : leases_) {
    if (lease.revoke_deadline_s.has_value() && *lease.revoke_deadline_s <= now_s) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    ReleaseLease(leases_.find(id));
    result.expired.push_back(id);
  }

  struct Key {
    int priority;
    double share;
    uint64_t sequence;
    std::string id;
  };
  std::vector<Key> keys;
  for (const auto& [id, p] : pending_) {
    double aging = static_cast<double>(now_s - p.submitted_s) /
                   static_cast<double>(std::max<int64_t>(1, options_.aging_horizon_s));
    keys.push_back({ClassOf(p.request).value, ledger_.WeightedDominantShare(p.request.team) - aging,
                    p.sequence, id});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.share != b.share) return a.share < b.share;
    return a.sequence < b.sequence;
  });
  // The head-of-line gang reservation is recomputed every cycle from the current state.
  for (GpuCapacity& c : capacity_.gpus()) c.gang_reserved_for.clear();
  for (auto& [id, p] : pending_) p.reserved_start_s.reset();
  bool gang_reserved = false;
  order_.clear();
  for (const Key& k : keys) {
    PendingRequest& p = pending_.at(k.id);
    if (TryAdmit(p, now_s, result)) {
      pending_.erase(k.id);
      continue;
    }
    order_.push_back(k.id);
    bool lacks_room = p.reason == WaitReason::kNoFreeCapacity || p.reason == WaitReason::kFragmented;
    if (!gang_reserved && lacks_room && p.request.slot_count > 1) {
      ReserveForGang(p, now_s);
      gang_reserved = p.reserved_start_s.has_value();
    }
  }
  return result;
}

std::vector<PendingInfo> Scheduler::Pending() const {
  std::vector<PendingInfo> out;
  for (const std::string& id : order_) {
    auto it = pending_.find(id);
    if (it != pending_.end()) {
      out.push_back({id, it->second.reason, it->second.submitted_s, it->second.reserved_start_s});
    }
  }
  for (const auto& [id, p] : pending_) {  // submitted since the last cycle
    if (std::find(order_.begin(), order_.end(), id) == order_.end()) {
      out.push_back({id, p.reason, p.submitted_s, p.reserved_start_s});
    }
  }
  return out;
}

}  // namespace gpupool::pool
