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
  while (!StopWithin(tick)) {
    std::vector<DiagnosticPlan::GpuView> view;
    {
      MutexLock lock(&mu_);
      view = head_view_;
    }
    for (int index : plan.Due(view, UnixNow())) {
      const auto start = std::chrono::steady_clock::now();
      absl::Status result = options_.diagnostic->Run(index);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      plan.Ran(index, result.ok(), UnixNow());
      if (absl::IsUnavailable(result)) continue;  // could not run: nothing to conclude
      absl::Status st = connection_->Call([this, index, &result, took]() -> kj::Promise<absl::Status> {
        loop_.AssertOnThread();
        auto req = caps_->session->reportDiagnosticRequest();
        req.setGpuIndex(index);
        req.setPassed(result.ok());
        req.setDetail(result.ok() ? std::string("memory pattern test passed") : std::string(result.message()));
        req.setDurationS(took);
        return req.send().then([](capnp::Response<rpc::AgentSession::ReportDiagnosticResults>&& resp) {
          return rpc::DecodeStatus(resp.getStatus());
        });
      });
      Log(absl::StrCat("diagnostic on GPU ", index, ": ", result.ok() ? "passed" : result.message(),
                       st.ok() ? "" : absl::StrCat(" (not reported: ", st.message(), ")")));
      if (StopWithin(std::chrono::milliseconds(0))) return;
    }
  }
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
