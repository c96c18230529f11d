// PoolService's health: each GPU's state machine (GpuHealthBook) fed by agents' readings and
// diagnostics, operators' words and "its leases are gone", and what each transition does to the
// scheduler; and diagnostics' leases (BeginDiagnostic, EndDiagnostic, InterruptDiagnostics over
// DiagnosticHolds). The rest of PoolService is in pool_service.cc.
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/service/pool_service.h"

namespace gpupool::runtime {

double PoolService::WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void PoolService::Transitioned(const pool::GpuRef& gpu, const std::optional<pool::HealthTransition>& t) {
  if (!t.has_value()) return;
  if (health_observer_) health_observer_(gpu, *t, *health_book_->Find(gpu));
  ApplyMachineState(gpu, t->to);
}

void PoolService::ApplyMachineState(const pool::GpuRef& gpu, pool::HealthState state) {
  if (driver_ == nullptr) {
    absl::StatusOr<std::vector<NodeLiveness::Change>> changes = liveness_->Report(gpu, state);
    if (changes.ok()) ApplyHealth(*changes);
  } else {
    ApplyHealth({{gpu, state}});
  }
  if (state == pool::HealthState::kDraining) QuarantineEmpty();
}

absl::Status PoolService::RestoreHealth(const pool::GpuRef& gpu, pool::HealthState state,
                                        std::vector<std::string> reasons, double since_s, std::string drained_by,
                                        std::string drain_reason) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    pool::GpuHealthMachine* m = health_book_->Find(gpu);
    if (m == nullptr) return absl::NotFoundError(absl::StrCat("GPU ", gpu.node, "/", gpu.index, " is not in this pool"));
    m->Restore(state, std::move(reasons), since_s, std::move(drained_by), std::move(drain_reason));
    ApplyMachineState(gpu, state);
    return absl::OkStatus();
  });
}

void PoolService::QuarantineEmpty() {
  std::vector<pool::GpuRef> draining = health_book_->Draining();
  if (draining.empty()) return;
  std::set<std::pair<std::string, int>> held;
  for (const auto& [id, lease] : scheduler_->leases()) {
    for (const pool::GpuRef& g : lease.gpus) held.insert({g.node, g.index});
  }
  for (const pool::GpuRef& gpu : draining) {
    if (held.count({gpu.node, gpu.index}) != 0) continue;
    Transitioned(gpu, health_book_->Find(gpu)->OnLeasesGone(WallSeconds()));
  }
}

absl::Status PoolService::ReportHealth(const pool::GpuRef& gpu, pool::HealthState state,
                                       std::vector<std::string> reasons) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    pool::GpuHealthMachine* m = health_book_->Find(gpu);
    if (m == nullptr) return absl::NotFoundError(absl::StrCat("GPU ", gpu.node, "/", gpu.index, " is not in this pool"));
    if (state == pool::HealthState::kQuarantined || state == pool::HealthState::kFailed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a reading's verdict is healthy, degraded, draining or lost, not ", pool::HealthStateName(state)));
    }
    Transitioned(gpu, m->OnVerdict(pool::HealthVerdict{state, std::move(reasons)}, WallSeconds()));
    return absl::OkStatus();
  });
}

absl::Status PoolService::ReportDiagnostic(const pool::GpuRef& gpu, bool passed, const std::string& detail) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    pool::GpuHealthMachine* m = health_book_->Find(gpu);
    if (m == nullptr) return absl::NotFoundError(absl::StrCat("GPU ", gpu.node, "/", gpu.index, " is not in this pool"));
    Transitioned(gpu, m->OnDiagnostic(passed, detail, WallSeconds()));
    return absl::OkStatus();
  });
}

namespace {

// States a diagnostic may run in: in service (while nothing is placed on the GPU) or quarantined.
bool DiagnosableIn(pool::HealthState state) {
  return pool::Schedulable(state) || state == pool::HealthState::kQuarantined;
}

std::string GpuName(const pool::GpuRef& gpu) { return absl::StrCat(gpu.node, "/", gpu.index); }

}  // namespace

absl::StatusOr<pool::Lease> PoolService::BeginDiagnostic(const pool::GpuRef& gpu, LeaseListener* listener) {
  MutexLock lock(&mu_);
  const int position = scheduler_->topology().Find(gpu);
  if (position < 0 || health_book_->Find(gpu) == nullptr) {
    return absl::NotFoundError(absl::StrCat("GPU ", GpuName(gpu), " is not in this pool"));
  }
  const pool::HealthState state = liveness_->Applied(gpu);
  if (!DiagnosableIn(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", GpuName(gpu), " is ", pool::HealthStateName(state), ": no diagnostic runs on it"));
  }
  if (diagnostics_.Holds(gpu)) {
    return absl::FailedPreconditionError(absl::StrCat("a diagnostic holds GPU ", GpuName(gpu), " already"));
  }
  if (!scheduler_->GpuIdle(gpu)) {
    return absl::FailedPreconditionError(absl::StrCat("GPU ", GpuName(gpu), " is leased or reserved for work"));
  }
  const pool::Lease& lease =
      diagnostics_.Begin(gpu, scheduler_->topology().gpus()[position].group, NowSeconds());
  OpenLease(lease, listener);
  return lease;
}

absl::Status PoolService::EndDiagnostic(const std::string& lease_id, std::optional<bool> passed,
                                        const std::string& detail) {
  return WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    std::optional<pool::Lease> hold = diagnostics_.End(lease_id);
    if (!hold.has_value()) {
      return absl::AbortedError(absl::StrCat("diagnostic lease '", lease_id,
                                             "' is not held (work placed on its GPU interrupted it, or the GPU "
                                             "left service): its outcome is not applied"));
    }
    CloseLease(lease_id, /*lost=*/false);
    if (!passed.has_value()) return absl::OkStatus();
    const pool::GpuRef& gpu = hold->gpus.front();
    Transitioned(gpu, health_book_->Find(gpu)->OnDiagnostic(*passed, detail, WallSeconds()));
    return absl::OkStatus();
  });
}

void PoolService::InterruptDiagnostics() {
  if (diagnostics_.holds().empty()) return;
  std::vector<std::pair<std::string, std::string>> ended;  // lease id, why: the tests that end now
  for (const auto& [id, lease] : diagnostics_.holds()) {
    const pool::GpuRef& gpu = lease.gpus.front();
    const pool::HealthState state = liveness_->Applied(gpu);
    if (!DiagnosableIn(state)) {
      ended.emplace_back(id, absl::StrCat("GPU ", GpuName(gpu), " is ", pool::HealthStateName(state)));
    } else if (!scheduler_->GpuIdle(gpu)) {
      ended.emplace_back(id, absl::StrCat("work was placed on GPU ", GpuName(gpu)));
    }
  }
  for (const auto& [id, why] : ended) {
    diagnostics_.End(id);
    outbox_.Lost(leases_.Find(id)->listener, id, why);  // before CloseLease forgets it
    CloseLease(id, /*lost=*/false);
  }
}

absl::StatusOr<std::vector<std::string>> PoolService::Operate(const std::string& node, std::optional<int> gpu,
                                                              pool::OperatorAction action, const std::string& who,
                                                              const std::string& reason) {
  std::vector<std::string> lines;
  absl::Status st = WithDeliveries([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    std::vector<pool::GpuRef> targets;
    bool node_known = false;
    for (const pool::InventoryGpu& g : inventory_.gpus()) {
      if (g.ref.node != node) continue;
      node_known = true;
      if (!gpu.has_value() || g.ref.index == *gpu) targets.push_back(g.ref);
    }
    if (!node_known) return absl::NotFoundError(absl::StrCat("node '", node, "' is not in this pool"));
    if (targets.empty()) {
      return absl::NotFoundError(absl::StrCat("node '", node, "' has no GPU ", *gpu));
    }
    // Try on copies first, so that a refusal for one GPU changes none.
    const double now = WallSeconds();
    for (const pool::GpuRef& ref : targets) {
      pool::GpuHealthMachine copy = *health_book_->Find(ref);
      absl::StatusOr<std::optional<pool::HealthTransition>> t = copy.OnOperator(action, who, reason, now);
      if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(ref.node, "/", ref.index, ": ", t.status().message()));
    }
    for (const pool::GpuRef& ref : targets) {
      pool::GpuHealthMachine* m = health_book_->Find(ref);
      const pool::HealthState before = m->state();
      absl::StatusOr<std::optional<pool::HealthTransition>> t = m->OnOperator(action, who, reason, now);
      if (!t->has_value() && health_observer_) {
        // No state changed, but an operator's word is journaled all the same, with who and why.
        health_observer_(ref,
                         pool::HealthTransition{.from = before, .to = before,
                                                .reason = absl::StrCat(pool::OperatorActionName(action), " by ", who,
                                                                       reason.empty() ? "" : ": ", reason),
                                                .actor = who, .at_s = now},
                         *m);
      }
      Transitioned(ref, *t);
      lines.push_back(absl::StrCat(ref.node, "/", ref.index, ": ", pool::HealthStateName(before),
                                   t->has_value() ? absl::StrCat(" -> ", pool::HealthStateName(m->state()))
                                                  : " (unchanged)"));
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return lines;
}

void PoolService::SetHealthObserver(HealthObserver observer) {
  MutexLock lock(&mu_);
  health_observer_ = std::move(observer);
}

std::optional<GpuHealthDetails> PoolService::HealthDetails(const pool::GpuRef& gpu) const {
  MutexLock lock(&mu_);
  const pool::GpuHealthMachine* m = health_book_->Find(gpu);
  if (m == nullptr) return std::nullopt;
  GpuHealthDetails d{.state = liveness_->Applied(gpu), .reasons = m->reasons(), .since_s = m->since_s(),
                     .last_diagnostic_s = m->last_diagnostic_s(), .last_diagnostic = m->last_diagnostic(),
                     .drained_by = m->drained_by(), .drain_reason = m->drain_reason()};
  if (d.state == pool::HealthState::kLost && m->state() != pool::HealthState::kLost) {
    d.reasons.insert(d.reasons.begin(), "its node's agent is away");
  }
  return d;
}

std::vector<NodeGpuState> PoolService::NodeGpuStates(const std::string& node) const {
  MutexLock lock(&mu_);
  std::set<int> held;
  for (const auto& [id, lease] : scheduler_->leases()) {
    for (const pool::GpuRef& g : lease.gpus) {
      if (g.node == node) held.insert(g.index);
    }
  }
  std::vector<NodeGpuState> out;
  for (const pool::InventoryGpu& g : inventory_.gpus()) {
    if (g.ref.node != node) continue;
    out.push_back({.index = g.ref.index, .state = liveness_->Applied(g.ref), .leased = held.count(g.ref.index) != 0});
  }
  return out;
}

}  // namespace gpupool::runtime
