// NodeAgent's health work: reading verdicts (on the heartbeat thread), diagnostics (a thread of
// their own: a real one takes seconds, which must not delay heartbeats) and the operators' health
// check (another thread: a hung program must not delay diagnostics). Each reports to the head,
// whose state machine decides what it means (pool/health_machine.h).
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/agent/health_check.h"
#include "runtime/agent/node_agent.h"
#include "runtime/agent/node_agent_capabilities.h"
#include "runtime/rpc/health_codec.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::runtime {

namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

void NodeAgent::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

bool NodeAgent::StopWithin(std::chrono::milliseconds d) {
  MutexLock lock(&mu_);
  return cv_.WaitFor(&mu_, d, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; });
}

void NodeAgent::PollHealth() {
  for (auto& [index, previous] : health_) {
    absl::StatusOr<pool::GpuHealthReading> reading = options_.driver->ReadHealth(pool::GpuRef{options_.driver_node, index});
    // The reading alone, not sticky: the head's state machine keeps a drained GPU drained.
    pool::HealthVerdict verdict = reading.ok()
                                      ? pool::AssessHealth(*reading)
                                      : pool::HealthVerdict{pool::HealthState::kLost,
                                                            {absl::StrCat("health unreadable: ", reading.status().message())}};
    if (verdict.state == previous.state && verdict.reasons == previous.reasons) continue;
    absl::Status st = connection_->Call([this, index = index, &verdict]() -> kj::Promise<absl::Status> {
      loop_.AssertOnThread();
      auto req = caps_->session->reportHealthRequest();
      req.setGpuIndex(index);
      req.setHealth(rpc::HealthToWire(verdict.state));
      auto reasons = req.initReasons(verdict.reasons.size());
      for (unsigned i = 0; i < verdict.reasons.size(); ++i) reasons.set(i, verdict.reasons[i]);
      return req.send().then([](capnp::Response<rpc::AgentSession::ReportHealthResults>&& resp) {
        return rpc::DecodeStatus(resp.getStatus());
      });
    });
    if (st.ok()) previous = std::move(verdict);  // else told again at the next poll
  }
}

void NodeAgent::DiagnosticsLoop() {
  DiagnosticPlan plan(options_.diagnostics);
  // Often enough to catch a quarantined GPU's retry on time; the plan says what is due.
  const std::chrono::milliseconds tick(100);
  bool head_leases = true;  // until a head older than diagnostics' leases says otherwise
  while (!StopWithin(tick)) {
    std::vector<DiagnosticPlan::GpuView> view;
    {
      MutexLock lock(&mu_);
      view = head_view_;
    }
    for (int index : plan.Due(view, UnixNow())) {
      // The test's own lease first: refused when work took the GPU since the head's last view.
      std::string lease_id;
      if (head_leases) {
        absl::StatusOr<std::string> lease = BeginDiagnostic(index);
        if (absl::IsUnimplemented(lease.status())) {
          head_leases = false;  // an older head: test without a lease, as it expects
        } else if (!lease.ok()) {
          plan.Skipped(index, UnixNow());
          continue;
        } else {
          lease_id = *lease;
        }
      }
      running_diagnostic_->Started(lease_id);
      if (StopWithin(std::chrono::milliseconds(0))) running_diagnostic_->InterruptAny("the agent is stopping");
      const auto start = std::chrono::steady_clock::now();
      absl::Status result = options_.diagnostic->Run(index, running_diagnostic_->stop());
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::string interrupted = running_diagnostic_->Ended();
      // Unavailable: could not run. Stopped: work took the GPU (or the agent stops). Neither
      // concludes anything; the lease is ended all the same.
      bool stopped = absl::IsCancelled(result) || !interrupted.empty();
      const bool concluded = !absl::IsUnavailable(result) && !stopped;
      absl::Status st = head_leases ? EndDiagnostic(lease_id, concluded, result, took)
                                    : concluded ? ReportDiagnostic(index, result, took) : absl::OkStatus();
      // The head did not apply the outcome (its lease was interrupted though the test ran to its
      // end, or the call failed): it counts as a test that did not run to its end.
      if (concluded && !st.ok()) {
        stopped = true;
        interrupted = std::string(st.message());
      }
      // Only an outcome the head applied counts towards the plan's backoff.
      if (stopped) {
        plan.Skipped(index, UnixNow());
        Log(absl::StrCat("diagnostic on GPU ", index, " interrupted: ", interrupted.empty() ? result.message() : interrupted));
      } else {
        plan.Ran(index, result.ok(), UnixNow());
        // Not stopped: the outcome, if the test concluded, was applied (st is OK).
        if (concluded) Log(absl::StrCat("diagnostic on GPU ", index, ": ", result.ok() ? "passed" : result.message()));
      }
      if (StopWithin(std::chrono::milliseconds(0))) return;
    }
  }
}

absl::StatusOr<std::string> NodeAgent::BeginDiagnostic(int index) {
  std::string lease_id;
  absl::Status st = connection_->Call([this, index, &lease_id]() -> kj::Promise<absl::Status> {
    loop_.AssertOnThread();
    auto req = caps_->session->beginDiagnosticRequest();
    req.setGpuIndex(index);
    return req.send().then(
        [&lease_id](capnp::Response<rpc::AgentSession::BeginDiagnosticResults>&& resp) {
          absl::Status st = rpc::DecodeStatus(resp.getStatus());
          if (st.ok()) lease_id = resp.getLeaseId();
          return st;
        },
        [](kj::Exception&& e) -> absl::Status {
          // A head older than diagnostics' leases does not know the method.
          if (e.getType() == kj::Exception::Type::UNIMPLEMENTED) {
            return absl::UnimplementedError("the head has no diagnostics' leases");
          }
          return absl::UnavailableError(e.getDescription().cStr());
        });
  });
  if (!st.ok()) return st;
  return lease_id;
}

namespace {

// A test's outcome as both reports carry it (endDiagnostic and an older head's reportDiagnostic).
template <typename Request>
void SetOutcome(Request& req, const absl::Status& result, double took_s) {
  req.setPassed(result.ok());
  req.setDetail(result.ok() ? std::string("memory pattern test passed") : std::string(result.message()));
  req.setDurationS(took_s);
}

// The head's answer to either.
constexpr auto kAnswer = [](auto&& resp) { return rpc::DecodeStatus(resp.getStatus()); };

}  // namespace

absl::Status NodeAgent::EndDiagnostic(const std::string& lease_id, bool concluded, const absl::Status& result,
                                      double took_s) {
  return connection_->Call([this, &lease_id, concluded, &result, took_s]() -> kj::Promise<absl::Status> {
    loop_.AssertOnThread();
    auto req = caps_->session->endDiagnosticRequest();
    req.setLeaseId(lease_id);
    req.setConcluded(concluded);
    SetOutcome(req, result, took_s);
    return req.send().then(kAnswer);
  });
}

absl::Status NodeAgent::ReportDiagnostic(int index, const absl::Status& result, double took_s) {
  return connection_->Call([this, index, &result, took_s]() -> kj::Promise<absl::Status> {
    loop_.AssertOnThread();
    auto req = caps_->session->reportDiagnosticRequest();
    req.setGpuIndex(index);
    SetOutcome(req, result, took_s);
    return req.send().then(kAnswer);
  });
}

void NodeAgent::HealthCheckLoop() {
  // A check may run up to its period (at most a minute): a hung one counts as failed.
  const std::chrono::milliseconds timeout = std::min(options_.health_check_every, std::chrono::milliseconds(60'000));
  do {
    absl::StatusOr<HealthCheckOutcome> out = RunHealthCheck(options_.health_check_program, timeout);
    if (!out.ok()) {
      Log(std::string(out.status().message()));
      continue;
    }
    if (out->passed()) continue;
    Log(absl::StrCat("health check failed: ", out->output));
    absl::Status st = connection_->Call([this, &out]() -> kj::Promise<absl::Status> {
      loop_.AssertOnThread();
      auto req = caps_->session->reportNodeCheckRequest();
      req.setPassed(false);
      req.setOutput(out->output);
      return req.send().then([](capnp::Response<rpc::AgentSession::ReportNodeCheckResults>&& resp) {
        return rpc::DecodeStatus(resp.getStatus());
      });
    });
    if (!st.ok()) Log(absl::StrCat("the head did not take the failed health check: ", st.message()));
  } while (!StopWithin(options_.health_check_every));
}

}  // namespace gpupool::runtime
