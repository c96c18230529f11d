#include "pool/health_machine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::pool {
namespace {

bool InService(HealthState s) { return Schedulable(s); }

}  // namespace

const char* DiagnosticResultName(DiagnosticResult result) {
  switch (result) {
    case DiagnosticResult::kPassed: return "passed";
    case DiagnosticResult::kFailed: return "failed";
    case DiagnosticResult::kNone: break;
  }
  return "";
}

const char* OperatorActionName(OperatorAction action) {
  switch (action) {
    case OperatorAction::kDrain: return "drain";
    case OperatorAction::kResume: return "resume";
    case OperatorAction::kRepaired: return "repaired";
  }
  return "";
}

std::optional<OperatorAction> ParseOperatorAction(const std::string& name) {
  for (OperatorAction a : {OperatorAction::kDrain, OperatorAction::kResume, OperatorAction::kRepaired}) {
    if (name == OperatorActionName(a)) return a;
  }
  return std::nullopt;
}

std::optional<HealthTransition> GpuHealthMachine::MoveTo(HealthState to, std::string reason, std::string actor,
                                                         double now_s) {
  if (to == state_) return std::nullopt;
  HealthTransition t{.from = state_, .to = to, .reason = std::move(reason), .actor = std::move(actor), .at_s = now_s};
  state_ = to;
  since_s_ = now_s;
  return t;
}

std::optional<HealthTransition> GpuHealthMachine::MaybeReturn(double now_s) {
  if (state_ != HealthState::kQuarantined || passes_ < policy_.passes_to_return) return std::nullopt;
  if (!drained_by_.empty() || !InService(last_verdict_.state)) return std::nullopt;
  auto t = MoveTo(last_verdict_.state, absl::StrCat("passed ", passes_, " diagnostics in a row"), "diagnostic", now_s);
  reasons_ = last_verdict_.reasons;
  passes_ = 0;
  failures_ = 0;
  return t;
}

std::optional<HealthTransition> GpuHealthMachine::OnVerdict(const HealthVerdict& verdict, double now_s) {
  last_verdict_ = verdict;
  const std::string why = verdict.reasons.empty() ? std::string(HealthStateName(verdict.state))
                                                  : absl::StrJoin(verdict.reasons, "; ");
  if (verdict.state == HealthState::kLost) {
    if (state_ == HealthState::kFailed || state_ == HealthState::kLost) return std::nullopt;
    reasons_ = verdict.reasons.empty() ? std::vector<std::string>{"GPU unreachable"} : verdict.reasons;
    return MoveTo(HealthState::kLost, why, "agent", now_s);
  }
  if (state_ == HealthState::kLost) {
    // Back on the bus (a reset or a reboot): it was out of service, so it proves itself first.
    passes_ = 0;
    reasons_ = {"reachable again after it was lost: diagnosing"};
    return MoveTo(HealthState::kQuarantined, "reachable again after it was lost", "agent", now_s);
  }
  if (InService(state_)) {
    if (verdict.state == HealthState::kDraining) {
      passes_ = 0;
      failures_ = 0;
      reasons_ = verdict.reasons;
      return MoveTo(HealthState::kDraining, why, "agent", now_s);
    }
    reasons_ = verdict.reasons;
    return MoveTo(verdict.state, why, "agent", now_s);
  }
  // Out of service: a reading adds reasons, never returns the GPU; a clean one may let a
  // quarantined GPU that has already passed its diagnostics go back.
  for (const std::string& r : verdict.reasons) {
    if (verdict.state == HealthState::kDraining && std::find(reasons_.begin(), reasons_.end(), r) == reasons_.end()) {
      reasons_.push_back(r);
    }
  }
  return MaybeReturn(now_s);
}

std::optional<HealthTransition> GpuHealthMachine::OnDiagnostic(bool passed, const std::string& detail, double now_s) {
  last_diagnostic_s_ = now_s;
  last_diagnostic_ = passed ? DiagnosticResult::kPassed : DiagnosticResult::kFailed;
  if (passed) {
    if (state_ != HealthState::kQuarantined) return std::nullopt;
    ++passes_;
    return MaybeReturn(now_s);
  }
  passes_ = 0;
  const std::string why = absl::StrCat("diagnostic failed: ", detail);
  if (InService(state_)) {
    failures_ = 1;
    reasons_ = {why};
    return MoveTo(HealthState::kDraining, why, "diagnostic", now_s);
  }
  if (state_ != HealthState::kDraining && state_ != HealthState::kQuarantined) return std::nullopt;
  ++failures_;
  if (failures_ < policy_.failures_to_fail) return std::nullopt;
  reasons_ = {absl::StrCat("failed ", failures_, " diagnostics; last: ", detail)};
  return MoveTo(HealthState::kFailed, reasons_.front(), "diagnostic", now_s);
}

void GpuHealthMachine::Restore(HealthState state, std::vector<std::string> reasons, double since_s,
                               std::string drained_by, std::string drain_reason) {
  state_ = state;
  reasons_ = std::move(reasons);
  since_s_ = since_s;
  drained_by_ = std::move(drained_by);
  drain_reason_ = std::move(drain_reason);
  passes_ = 0;
  failures_ = state == HealthState::kFailed ? policy_.failures_to_fail : 0;
  // The readings are not known yet: out of service, it waits for a clean one before returning.
  last_verdict_ = HealthVerdict{InService(state) ? state : HealthState::kHealthy, {}};
}

std::optional<HealthTransition> GpuHealthMachine::OnLeasesGone(double now_s) {
  if (state_ != HealthState::kDraining) return std::nullopt;
  // The reasons stay: they say why it was drained, which is what an operator asks of it.
  return MoveTo(HealthState::kQuarantined, "its leases are gone", "pool", now_s);
}

absl::StatusOr<std::optional<HealthTransition>> GpuHealthMachine::OnOperator(OperatorAction action,
                                                                            const std::string& who,
                                                                            const std::string& reason,
                                                                            double now_s) {
  if (who.empty()) return absl::InvalidArgumentError("an operator's action needs who took it");
  switch (action) {
    case OperatorAction::kDrain: {
      if (reason.empty()) return absl::InvalidArgumentError("a drain needs a reason (--reason TEXT)");
      drained_by_ = who;
      drain_reason_ = reason;
      const std::string why = absl::StrCat("drained by ", who, ": ", reason);
      if (!InService(state_)) {
        if (std::find(reasons_.begin(), reasons_.end(), why) == reasons_.end()) reasons_.push_back(why);
        return std::optional<HealthTransition>();
      }
      passes_ = 0;
      failures_ = 0;
      reasons_ = {why};
      return MoveTo(HealthState::kDraining, why, who, now_s);
    }
    case OperatorAction::kResume: {
      if (state_ == HealthState::kFailed || state_ == HealthState::kLost) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the GPU is ", HealthStateName(state_), " (", absl::StrJoin(reasons_, "; "),
            "): resume does not vouch for hardware; after fixing it say `gpupool gpu repaired`, which "
            "quarantines it until it passes its diagnostics"));
      }
      drained_by_.clear();
      drain_reason_.clear();
      if (InService(state_)) return std::optional<HealthTransition>();
      passes_ = 0;
      failures_ = 0;
      reasons_.clear();
      const HealthState to = InService(last_verdict_.state) ? last_verdict_.state : HealthState::kHealthy;
      if (to == HealthState::kDegraded) reasons_ = last_verdict_.reasons;
      return MoveTo(to, absl::StrCat("resumed by ", who, reason.empty() ? "" : ": ", reason), who, now_s);
    }
    case OperatorAction::kRepaired: {
      if (InService(state_)) return std::optional<HealthTransition>();
      drained_by_.clear();
      drain_reason_.clear();
      passes_ = 0;
      failures_ = 0;
      const std::string why = absl::StrCat("repaired by ", who, reason.empty() ? "" : ": ", reason);
      reasons_ = {absl::StrCat(why, "; diagnosing")};
      if (state_ == HealthState::kDraining) return std::optional<HealthTransition>();  // quarantined once empty
      return MoveTo(HealthState::kQuarantined, why, who, now_s);
    }
  }
  return absl::InvalidArgumentError("unknown operator action");
}

}  // namespace gpupool::pool
