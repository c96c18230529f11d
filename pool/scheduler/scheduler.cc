#include "pool/scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/placement/policy_registry.h"
#include "pool/scheduler/move_planner.h"

namespace gpupool::pool {
namespace {

constexpr absl::string_view kDefaultClass = "training";

// The static constraints of a request, as a cache key.
std::string ConstraintSignature(const LeaseRequest& r) {
  std::vector<std::string> models = r.allowed_models;
  std::sort(models.begin(), models.end());
  std::string key = absl::StrCat(absl::StrJoin(models, ","), "|", r.min_gpu_memory_mib, "|",
                                 r.nvlink_required, "|");
  for (const auto& [k, v] : r.required_labels) absl::StrAppend(&key, k, "=", v, ";");
  absl::StrAppend(&key, "|");
  for (const auto& [k, v] : r.forbidden_labels) absl::StrAppend(&key, k, "!=", v, ";");
  return key;
}

}  // namespace

constexpr absl::string_view kPacking = "packing";

absl::Status ValidPlacementPolicy(const std::string& name) {
  if (name == kPacking) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<placement::PlacementPolicy>> policy = placement::MakePolicy(name, {});
  if (policy.ok()) return absl::OkStatus();
  std::vector<std::string> names = {std::string(kPacking)};
  for (std::string_view n : placement::PolicyNames()) names.emplace_back(n);
  return absl::InvalidArgumentError(absl::StrCat("unknown placement policy '", name, "' (allowed: ",
                                                 absl::StrJoin(names, ", "), ")"));
}

Scheduler::Scheduler(const Inventory& inventory, const SchedulingConfig& config,
                     SchedulerOptions options)
    : config_(&config),
      options_(options),
      topology_(inventory, config),
      state_(topology_),
      reserves_(topology_, config),
      ledger_(config, topology_.GroupCapacityMilli()) {
  std::vector<int> all;
  for (size_t g = 0; g < topology_.gpus().size(); ++g) {
    state_[static_cast<int>(g)].schedulable = inventory.Find(topology_.gpus()[g].ref)->schedulable();
    all.push_back(static_cast<int>(g));
  }
  reserves_.Refresh(state_, all);
  if (options_.placement_policy != kPacking) {
    // A name ValidPlacementPolicy refuses places by packing (callers validate names first).
    absl::StatusOr<std::unique_ptr<placement::PlacementPolicy>> policy =
        placement::MakePolicy(options_.placement_policy, {.models = &topology_.models(),
                                                          .workload = options_.placement_prior,
                                                          .seed = options_.placement_seed});
    if (policy.ok()) policy_ = *std::move(policy);
  }
}

const PriorityClass& Scheduler::ClassOf(const LeaseRequest& r) const {
  const PriorityClass* c =
      config_->FindClass(r.priority_class.empty() ? kDefaultClass : r.priority_class);
  return c != nullptr ? *c : config_->priority_classes.front();  // Validate guarantees c
}

const Scheduler::Eligibility& Scheduler::EligibilityOf(const LeaseRequest& r) {
  std::string key = ConstraintSignature(r);
  auto it = eligibility_.find(key);
  if (it != eligibility_.end()) return it->second;
  Eligibility e;
  for (size_t g = 0; g < topology_.gpus().size(); ++g) {
    const GpuStatic& s = topology_.gpus()[g];
    if (GpuMatches(s, r, s.group)) e.candidates[s.group].push_back(static_cast<int>(g));
  }
  for (const auto& [group, candidates] : e.candidates) {
    e.index[group] = std::make_unique<FreeCapacityIndex>(topology_, candidates, state_);
    if (policy_) e.views[group] = std::make_unique<PolicyView>(topology_, candidates, state_, topology_.models());
  }
  if (policy_ && e.candidates.size() > 1) {
    std::vector<int> all;
    for (const auto& [group, candidates] : e.candidates) all.insert(all.end(), candidates.begin(), candidates.end());
    std::sort(all.begin(), all.end());
    e.all_groups = std::make_unique<PolicyView>(topology_, all, state_, topology_.models());
  }
  return eligibility_.emplace(std::move(key), std::move(e)).first->second;
}

int64_t Scheduler::RequestMilli(const LeaseRequest& r, const std::string& group) const {
  return int64_t{SlotComputeMilli(r.slot, topology_.GroupModel(group))} * r.slot_count;
}

ShapeId Scheduler::ShapeOf(const LeaseRequest& r) {
  std::string key = absl::StrCat(ConstraintSignature(r), "#", r.slot.ToString(), "#", r.slot_count, "#",
                                 static_cast<int>(r.topology));
  return shapes_.try_emplace(std::move(key), ShapeId{static_cast<uint32_t>(shapes_.size())}).first->second;
}

BackfillSet Scheduler::BackfillOf(const LeaseRequest& r, int64_t now_s) const {
  if (!r.runtime_estimate_s.has_value()) return {};
  std::set<int64_t> starts;
  for (int g : gang_reserved_gpus_) {
    if (now_s + *r.runtime_estimate_s <= state_[g].gang_reserved_until_s) {
      starts.insert(state_[g].gang_reserved_until_s);
    }
  }
  return BackfillSet(starts.begin(), starts.end());
}

std::optional<std::vector<int>> Scheduler::Place(const PendingRequest& p,
                                                 const std::vector<int>& candidates,
                                                 const CapacityState& state,
                                                 PlacementOptions options) const {
  options.owner = p.handle;
  options.first_fit = options_.first_fit;
  return PlaceRequest(topology_, state, p.request, candidates, options);
}

std::optional<std::vector<int>> Scheduler::PlaceLiveAnywhere(const PendingRequest& p,
                                                             const std::string& group,
                                                             PlacementOptions options) const {
  options.owner = p.handle;
  options.first_fit = options_.first_fit;
  if (policy_) {
    PolicyAnswer answer = p.eligibility->views.at(group)->Place(*policy_, state_, p.request, options);
    if (answer.answered) return answer.gpus;
  }
  const FreeCapacityIndex& index = *p.eligibility->index.at(group);
  if (index.Answers(p.request, options)) return index.Place(state_, p.request, options);
  return PlaceRequest(topology_, state_, p.request, p.eligibility->candidates.at(group), options);
}

PolicyAnswer Scheduler::PolicyAcrossGroups(const PendingRequest& p, PlacementOptions options) const {
  if (!policy_ || p.eligibility->all_groups == nullptr) return {};
  options.owner = p.handle;
  options.first_fit = options_.first_fit;
  return p.eligibility->all_groups->Place(*policy_, state_, p.request, options);
}

void Scheduler::RefreshGpus(const std::vector<int>& gpus) {
  memo_.StateChanged();
  reserves_.Refresh(state_, gpus);
  std::vector<int> nodes;
  for (int g : gpus) {
    nodes.push_back(topology_.gpus()[g].node);
    if (state_[g].gang_reserved_for != 0) {
      gang_reserved_gpus_.insert(g);
    } else {
      gang_reserved_gpus_.erase(g);
    }
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (auto& [key, e] : eligibility_) {
    for (auto& [group, index] : e.index) {
      for (int n : nodes) index->RefreshNode(state_, n);
    }
    for (auto& [group, view] : e.views) {
      for (int n : nodes) view->RefreshNode(state_, n);
    }
    if (e.all_groups != nullptr) {
      for (int n : nodes) e.all_groups->RefreshNode(state_, n);
    }
  }
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
    // A catalogue model, or a model the catalogue lacks that this pool has (by its own name).
    if (FindGpuModel(m) == nullptr && !topology_.HasModel(m)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown GPU model '", m, "' (known: ",
                                                     KnownGpuModelNames(), ")"));
    }
  }
  // Per slot at most 2^40 milli-cores or MiB (a billion cores, an exbibyte): far beyond any node,
  // and small enough that a gang's sum cannot overflow.
  constexpr int64_t kMaxHostPerSlot = int64_t{1} << 40;
  if (r.slot.cpu_milli < 0 || r.slot.host_memory_mib < 0 || r.slot.cpu_milli > kMaxHostPerSlot ||
      r.slot.host_memory_mib > kMaxHostPerSlot) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host CPU and memory per slot must be within 0..2^40 milli-cores and MiB (got ", r.slot.ToString(), ")"));
  }
  if (r.min_gpu_memory_mib < 0) {
    return absl::InvalidArgumentError("minimum GPU memory cannot be negative");
  }
  if (r.runtime_estimate_s.has_value() && *r.runtime_estimate_s <= 0) {
    return absl::InvalidArgumentError("runtime estimate must be positive");
  }
  switch (r.slot.kind) {
    case SlotKind::kWholeGpu:
      break;
    case SlotKind::kFraction:
      if (r.slot.host_only()) {
        if (r.slot.cpu_milli == 0 && r.slot.host_memory_mib == 0) {
          return absl::InvalidArgumentError("a host-only slot must ask for host CPU or memory");
        }
        if (r.hardware_isolation || r.nvlink_required || r.min_gpu_memory_mib > 0) {
          return absl::InvalidArgumentError(
              "a host-only slot uses no GPU: hardware isolation, NVLink and GPU memory do not apply");
        }
        break;
      }
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
  const Eligibility& e = EligibilityOf(r);
  if (e.candidates.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", r.id, "' matches no GPU in the pool (models, labels, memory or NVLink)"));
  }
  const ShapeId shape = ShapeOf(r);
  // Where a spare reserve binds the request's class, it must fit beside the reserve.
  const int class_value = ClassOf(r).value;
  const std::pair<ShapeId, int> fits_key{shape, reserves_.empty() ? 0 : class_value};
  auto known = fits_empty_pool_.find(fits_key);
  if (known == fits_empty_pool_.end()) {
    CapacityState empty(topology_);
    std::optional<std::string> group_that_fits;
    for (const auto& [group, candidates] : e.candidates) {
      std::optional<std::vector<int>> gpus = PlaceRequest(topology_, empty, r, candidates, {.ignore_health = true});
      if (!gpus) continue;
      if (const ReserveRule* rule = reserves_.For(group); rule != nullptr && class_value < rule->min_priority &&
          !LeavesReserve(empty, r, *gpus, *rule, static_cast<int>(rule->group_gpus.size()))) {
        continue;
      }
      group_that_fits = group;
      break;
    }
    known = fits_empty_pool_.emplace(fits_key, group_that_fits).first;
  }
  if (!known->second.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", r.id, "' for ", r.slot_count, " x ", r.slot.ToString(), " (",
        GangTopologyName(r.topology), ") does not fit even in the empty pool",
        reserves_.empty() ? "" : " beside the spare GPUs reserved for higher priority classes"));
  }
  const PriorityClass& pc = ClassOf(r);
  const std::string& fitting_group = *known->second;
  if (!ledger_.EverFits(r.team, RequestMilli(r, fitting_group), pc.preemptible)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "request '", r.id, "' needs ", RequestMilli(r, fitting_group) / 1000.0,
        " GPUs, more than team '", r.team, "' may ever hold",
        pc.preemptible ? "" : " (a non-preemptible class never borrows)"));
  }
  if (policy_) policy_->Observe(PodRequestOf(r, topology_.models()));
  std::string id = r.id;
  PendingRequest& p = pending_[id];
  p.request = std::move(r);
  p.submitted_s = now_s;
  p.handle = next_handle_++;
  p.eligibility = &e;
  p.shape = shape;
  return id;
}

absl::StatusOr<std::string> Scheduler::Resubmit(LeaseRequest request, int64_t now_s, int64_t submitted_s) {
  absl::StatusOr<std::string> id = Submit(std::move(request), now_s);
  if (id.ok()) pending_.at(*id).submitted_s = std::min(submitted_s, now_s);
  return id;
}

absl::Status Scheduler::Cancel(const std::string& request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) {
    return absl::NotFoundError(absl::StrCat("no pending request '", request_id, "'"));
  }
  Unreserve(it->second);
  pending_.erase(it);
  return absl::OkStatus();
}

bool Scheduler::VictimsStillRunning(const std::string& request_id) const {
  for (const auto& [id, lease] : leases_) {
    if (lease.revoke_deadline_s.has_value() && lease.revoked_for == request_id) return true;
  }
  return false;
}

void Scheduler::GiveBack(const Lease& lease, CapacityState& state) const {
  for (const GpuRef& ref : lease.gpus) state.Give(topology_.Find(ref), lease.request.slot);
}

void Scheduler::ReleaseLease(std::map<std::string, Lease>::iterator it) {
  const Lease& lease = it->second;
  const std::string revoked_for = lease.revoked_for;
  if (!lease.revoke_deadline_s.has_value()) victims_.Remove(lease, ClassOf(lease.request));
  GiveBack(lease, state_);
  std::vector<int> gpus;
  for (const GpuRef& ref : lease.gpus) gpus.push_back(topology_.Find(ref));
  RefreshGpus(gpus);
  ledger_.Remove(lease.request.team, lease.group, lease.milli);
  leases_.erase(it);
  memo_.CapacityGrew();
  // A victim's room goes to the request it was revoked for, as far as that request's hold lacks it.
  if (auto waiting = pending_.find(revoked_for); !revoked_for.empty() && waiting != pending_.end() &&
                                                  waiting->second.victims_pending) {
    TopUpHold(waiting->second);
  }
}

absl::Status Scheduler::Release(const std::string& lease_id, int64_t now_s) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return absl::NotFoundError(absl::StrCat("no lease '", lease_id, "'"));
  ReleaseLease(it);
  return absl::OkStatus();
}

absl::Status Scheduler::Adopt(Lease lease, int64_t now_s) {
  if (leases_.count(lease.id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("lease '", lease.id, "' is already held"));
  }
  const auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat("lease '", lease.id, "' cannot be taken back: ", why));
  };
  if (absl::Status valid = Validate(lease.request); !valid.ok()) return refuse(valid.message());
  if (lease.gpus.empty()) return refuse("it holds no GPU");
  if (topology_.GroupModel(lease.group) == nullptr) {
    return refuse(absl::StrCat("model group '", lease.group, "' is not in this pool"));
  }
  // Slot by slot; what was taken goes back if one does not fit (nothing changes on failure).
  std::vector<int> gpus;
  const auto give_back = [&] {
    for (int g : gpus) state_.Give(g, lease.request.slot);
  };
  lease.milli = 0;
  for (const GpuRef& ref : lease.gpus) {
    int g = topology_.Find(ref);
    // The GPU share must fit; the host share is taken as it comes, even past what the node now
    // declares (its configuration may have shrunk since): the lease's tasks are running, and
    // refusing it would hand its GPUs out under them. New work waits until the node has room.
    if (g < 0 || !state_.GpuFits(g, lease.request.slot)) {
      give_back();
      return refuse(absl::StrCat("GPU ", ref.node, "/", ref.index,
                                 g < 0 ? " is not in this pool" : " has no room for its slot"));
    }
    state_.Take(g, lease.request.slot);
    gpus.push_back(g);
    lease.milli += SlotComputeMilli(lease.request.slot, topology_.gpus()[g].model);
  }
  RefreshGpus(gpus);
  lease.started_s = now_s;
  lease.last_checkpoint_s = now_s;
  lease.revoke_deadline_s.reset();
  lease.revoked_for.clear();
  // Borrowing as the quotas stand now (the configuration may have changed since the grant): it
  // decides whether owners may reclaim the lease.
  lease.borrowing = !ledger_.FitsNominal(lease.request.team, lease.group, lease.milli);
  if (lease.borrowing) memo_.BorrowingAdmitted();
  ledger_.Add(lease.request.team, lease.group, lease.milli);
  // New leases are "<request id>#<handle>": keep handles clear of the adopted ones.
  if (size_t hash = lease.id.rfind('#'); hash != std::string::npos) {
    uint64_t handle = 0;
    if (absl::SimpleAtoi(absl::string_view(lease.id).substr(hash + 1), &handle)) {
      next_handle_ = std::max(next_handle_, handle + 1);
    }
  }
  const Lease& held = leases_[lease.id] = std::move(lease);
  victims_.Add(held, ClassOf(held.request));
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
  if (!lease.revoke_deadline_s.has_value()) victims_.Remove(lease, pc);
  lease.revoke_deadline_s = now_s + pc.grace_period_s;
  lease.revoked_for = for_request;
  return Revocation{lease.id, cause, *lease.revoke_deadline_s, for_request, WorkAtRisk(lease, now_s)};
}

CycleResult Scheduler::SetGpuHealth(const GpuRef& ref, HealthState state, int64_t now_s) {
  CycleResult result;
  int g = topology_.Find(ref);
  if (g < 0) return result;
  bool schedulable = state == HealthState::kHealthy || state == HealthState::kDegraded;
  if (schedulable && !state_[g].schedulable) memo_.CapacityGrew();
  state_[g].schedulable = schedulable;
  RefreshGpus({g});
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

WaitReason Scheduler::DiagnoseWait(const PendingRequest& p, const std::string& group,
                                   int64_t now_s) const {
  const LeaseRequest& r = p.request;
  // The spare reserve first: it is what an operator can change, and the questions below ask
  // about everything else, with the reserve open.
  const ReserveRule* rule = RestrictedBy(p, group);
  if (rule != nullptr && PlaceLiveAnywhere(p, group, {.ignore_reservations = true, .now_s = now_s}) &&
      !PlaceLive(p, group, {.ignore_reservations = true, .now_s = now_s})) {
    return WaitReason::kKeptForReserve;
  }
  if (PlaceLiveAnywhere(p, group, {.ignore_reservations = true, .now_s = now_s})) {
    return PlaceLiveAnywhere(p, group, {.ignore_gang_reservations = true, .now_s = now_s})
               ? WaitReason::kGangReservation
               : WaitReason::kBehindHigherPriority;
  }
  if (PlaceLiveAnywhere(p, group, {.ignore_health = true, .ignore_reservations = true})) {
    return WaitReason::kUnhealthyCapacity;
  }
  if ((r.slot.cpu_milli > 0 || r.slot.host_memory_mib > 0) &&
      PlaceLiveAnywhere(p, group, {.ignore_reservations = true, .ignore_host = true})) {
    return WaitReason::kNoHostCapacity;
  }
  return RoomWait(p, group);
}

WaitReason Scheduler::RoomWait(const PendingRequest& p, const std::string& group) const {
  // Enough free compute among matching healthy GPUs, but not in the shape the topology needs?
  // (Less the reserve, for a request it binds.)
  const ReserveRule* rule = RestrictedBy(p, group);
  int64_t free = p.eligibility->index.at(group)->SchedulableFreeMilli();
  if (rule != nullptr) free = std::max<int64_t>(0, free - int64_t{rule->gpus} * 1000);
  int64_t need = static_cast<int64_t>(SlotComputeMilli(p.request.slot)) * p.request.slot_count;
  return free >= need ? WaitReason::kFragmented : WaitReason::kNoFreeCapacity;
}
std::optional<int64_t> Scheduler::NextTimedChange(int64_t now_s) const {
  std::optional<int64_t> next = memo_.NextMoveRetry(now_s);
  for (const MoveHold& h : move_holds_) {
    if (h.until_s > now_s && (!next || h.until_s < *next)) next = h.until_s;
  }
  return next;
}

std::map<std::tuple<std::string, std::string, WaitReason>, int64_t> Scheduler::PendingCounts() const {
  std::map<std::tuple<std::string, std::string, WaitReason>, int64_t> counts;
  for (const auto& [id, p] : pending_) ++counts[{p.request.team, p.request.priority_class, p.reason}];
  return counts;
}

bool Scheduler::GpuIdle(const GpuRef& gpu) const {
  int g = topology_.Find(gpu);
  return g >= 0 && state_.Untouched(g) && gang_reserved_gpus_.count(g) == 0;
}

int64_t Scheduler::WaitingMilliThatFitsNow(int64_t enough) const {
  // Room held for requests waiting for their victims counts as free, as reservations do here.
  std::optional<CapacityState> unheld;
  for (const auto& [id, p] : pending_) {
    for (const Hold& h : p.holds) {
      if (h.held.empty()) continue;
      if (!unheld) unheld = state_;
      unheld->GiveShare(h.gpu, h.held);
    }
  }
  const CapacityState& state = unheld ? *unheld : state_;
  int64_t fits = 0;
  for (const auto& [id, p] : pending_) {
    if (fits >= enough) break;
    if (p.eligibility == nullptr) continue;
    PlacementOptions options;
    options.ignore_reservations = true;
    options.ignore_gang_reservations = true;
    options.first_fit = true;  // whether it fits, not where best
    for (const auto& [group, candidates] : p.eligibility->candidates) {
      if (PlaceRequest(topology_, state, p.request, candidates, options)) {
        fits += RequestMilli(p.request, group);
        break;
      }
    }
  }
  return fits;
}

std::vector<PendingInfo> Scheduler::Pending() const {
  std::vector<PendingInfo> out;
  std::set<std::string> listed;
  for (const std::string& id : order_) {
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    out.push_back({id, it->second.reason, it->second.submitted_s, it->second.reserved_start_s,
                   it->second.guaranteed_since_s, it->second.request.team, it->second.request.priority_class});
    listed.insert(id);
  }
  for (const auto& [id, p] : pending_) {  // submitted since the last cycle
    if (!listed.contains(id)) {
      out.push_back({id, p.reason, p.submitted_s, p.reserved_start_s, p.guaranteed_since_s, p.request.team,
                     p.request.priority_class});
    }
  }
  return out;
}

}  // namespace gpupool::pool
