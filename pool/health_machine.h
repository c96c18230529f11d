// File: pool/health_machine.h
//
// The life of one GPU's health (DESIGN §4b), as the head keeps it:
//
//   healthy ⇄ degraded ──(critical reading, failed diagnostic, operator drain)──▶ draining
//   draining ──(its last lease is gone)──▶ quarantined
//   quarantined ──(passes `passes_to_return` diagnostics in a row, readings clean)──▶ healthy
//   draining/quarantined ──(`failures_to_fail` failed diagnostics since it left service)──▶ failed
//   failed ──(an operator says `repaired`)──▶ quarantined      (it must pass again before use)
//   any ──(the GPU fell off the bus)──▶ lost ──(readings clean again, or `repaired`)──▶ quarantined
//
// Readings (AssessHealth verdicts) move a GPU in service between healthy and degraded and take it
// out of service; they never bring it back: a clean reading after an uncorrectable error proves
// nothing (NVIDIA's device plugin stops here and never returns the GPU, k8s-device-plugin #234).
// Diagnostics bring it back, and only while the latest reading is clean. An operator's drain pins
// the GPU out of service (diagnostics do not return it) until the operator resumes it.
//
// Failures count from the moment the GPU left service, not in a row: a GPU that fails every other
// diagnostic is as unfit as one that always fails.
//
//   GpuHealthMachine m(HealthPolicy{.passes_to_return = 2, .failures_to_fail = 3});
//   if (auto t = m.OnDiagnostic(false, "memory test: 12 words altered", now)) Journal(*t);
//   if (m.state() == HealthState::kDraining && no_leases) Journal(*m.OnLeasesGone(now));
//
// Every method returns the transition it made (from, to, reason, who, when) or nullopt when the
// state did not change. Times are whatever clock the caller uses (the head: Unix seconds).
// Not thread-safe; CUDA-free.
#ifndef GPUPOOL_POOL_HEALTH_MACHINE_H_
#define GPUPOOL_POOL_HEALTH_MACHINE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/health.h"

namespace gpupool::pool {

struct HealthPolicy {
  int passes_to_return = 2;  // diagnostics passed in a row that return a quarantined GPU
  int failures_to_fail = 3;  // failed diagnostics since it left service that make it failed
};

enum class DiagnosticResult { kNone, kPassed, kFailed };
// "passed" | "failed" | "" (none yet).
const char* DiagnosticResultName(DiagnosticResult result);

struct HealthTransition {
  HealthState from = HealthState::kHealthy;
  HealthState to = HealthState::kHealthy;
  std::string reason;
  std::string actor;  // "agent" (readings), "diagnostic", "pool" (leases gone) or the operator
  double at_s = 0;
};

enum class OperatorAction { kDrain, kResume, kRepaired };
// "drain" | "resume" | "repaired"; ParseOperatorAction is the inverse (nullopt otherwise).
const char* OperatorActionName(OperatorAction action);
std::optional<OperatorAction> ParseOperatorAction(const std::string& name);

class GpuHealthMachine {
 public:
  explicit GpuHealthMachine(HealthPolicy policy = {}, double now_s = 0) : policy_(policy), since_s_(now_s) {}

  // A reading's verdict (AssessHealth), as the agent or driver reports it.
  std::optional<HealthTransition> OnVerdict(const HealthVerdict& verdict, double now_s);
  // A diagnostic's outcome; `detail` says what failed (or what it measured).
  std::optional<HealthTransition> OnDiagnostic(bool passed, const std::string& detail, double now_s);
  // The pool holds no lease on this GPU any more: a draining GPU is quarantined.
  std::optional<HealthTransition> OnLeasesGone(double now_s);
  // An operator's word. FailedPrecondition (saying what to do instead) for `resume` of a failed
  // or lost GPU: only `repaired` vouches for hardware; an empty `who` is InvalidArgument.
  absl::StatusOr<std::optional<HealthTransition>> OnOperator(OperatorAction action, const std::string& who,
                                                             const std::string& reason, double now_s);

  // Takes back a state a previous run journaled (a head restart): counters start from nothing,
  // except that a failed GPU stays failed.
  void Restore(HealthState state, std::vector<std::string> reasons, double since_s, std::string drained_by,
               std::string drain_reason);

  HealthState state() const { return state_; }
  // Why it is in this state (empty when healthy).
  const std::vector<std::string>& reasons() const { return reasons_; }
  double since_s() const { return since_s_; }
  std::optional<double> last_diagnostic_s() const { return last_diagnostic_s_; }
  DiagnosticResult last_diagnostic() const { return last_diagnostic_; }
  const std::string& drained_by() const { return drained_by_; }  // empty: not drained by an operator
  const std::string& drain_reason() const { return drain_reason_; }
  int passes() const { return passes_; }      // in a row, while quarantined
  int failures() const { return failures_; }  // since it left service

 private:
  std::optional<HealthTransition> MoveTo(HealthState to, std::string reason, std::string actor, double now_s);
  // A quarantined GPU that has passed enough diagnostics, with clean readings and no operator's
  // drain, goes back into service.
  std::optional<HealthTransition> MaybeReturn(double now_s);

  HealthPolicy policy_;
  HealthState state_ = HealthState::kHealthy;
  std::vector<std::string> reasons_;
  double since_s_ = 0;
  HealthVerdict last_verdict_;  // the latest reading's verdict
  std::optional<double> last_diagnostic_s_;
  DiagnosticResult last_diagnostic_ = DiagnosticResult::kNone;
  std::string drained_by_;
  std::string drain_reason_;
  int passes_ = 0;
  int failures_ = 0;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_HEALTH_MACHINE_H_
