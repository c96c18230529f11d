// AgentSession's health reports: an agent's reading verdicts, the diagnostics it ran and the
// operators' health-check program's outcome, each applied to its own node's GPUs only.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/rpc/health_codec.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/service/agent_registry.h"

namespace gpupool::runtime {
namespace {

// The operators' health-check program speaks for the node under this name in the journal.
constexpr char kHealthCheck[] = "health-check";
constexpr size_t kMaxReasonBytes = 1024;  // a report's text is kept in the journal and the views

std::string Clip(std::string text) {
  if (text.size() > kMaxReasonBytes) text = text.substr(0, kMaxReasonBytes) + "...";
  return text;
}

// A diagnostic's detail as the journal and the views keep it: clipped, with its duration.
std::string DiagnosticDetail(std::string text, double duration_s) {
  std::string detail = Clip(std::move(text));
  if (duration_s > 0) absl::StrAppend(&detail, absl::StrFormat("%s(%.3g s)", detail.empty() ? "" : " ", duration_s));
  return detail;
}

}  // namespace

kj::Promise<void> AgentSession::reportHealth(ReportHealthContext context) {
  auto p = context.getParams();
  const auto wire = static_cast<uint16_t>(p.getHealth());
  std::optional<pool::HealthState> state = rpc::HealthFromWire(wire);
  absl::Status st;
  if (!state.has_value()) {
    st = absl::InvalidArgumentError(absl::StrCat("unknown health value ", wire));
  } else if (p.getReasons().size() > 64) {
    st = absl::InvalidArgumentError("more than 64 health reasons");
  } else {
    std::vector<std::string> reasons;
    for (capnp::Text::Reader r : p.getReasons()) reasons.push_back(Clip(r));
    st = registry_.pool().ReportHealth(pool::GpuRef{node_, p.getGpuIndex()}, *state, std::move(reasons));
  }
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> AgentSession::reportDiagnostic(ReportDiagnosticContext context) {
  auto p = context.getParams();
  absl::Status st = registry_.pool().ReportDiagnostic(pool::GpuRef{node_, p.getGpuIndex()}, p.getPassed(),
                                                      DiagnosticDetail(p.getDetail(), p.getDurationS()));
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> AgentSession::beginDiagnostic(BeginDiagnosticContext context) {
  absl::StatusOr<std::string> lease = registry_.BeginDiagnostic(node_, context.getParams().getGpuIndex(), this);
  if (lease.ok()) context.getResults().setLeaseId(*lease);
  rpc::EncodeStatus(lease.status(), context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> AgentSession::endDiagnostic(EndDiagnosticContext context) {
  auto p = context.getParams();
  absl::Status st = registry_.EndDiagnostic(this, p.getLeaseId(),
                                            p.getConcluded() ? std::optional<bool>(p.getPassed()) : std::nullopt,
                                            DiagnosticDetail(p.getDetail(), p.getDurationS()));
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> AgentSession::reportNodeCheck(ReportNodeCheckContext context) {
  auto p = context.getParams();
  absl::Status st;
  if (!p.getPassed()) {
    std::string output = Clip(p.getOutput());
    absl::StatusOr<std::vector<std::string>> lines = registry_.pool().Operate(
        node_, std::nullopt, pool::OperatorAction::kDrain, kHealthCheck,
        output.empty() ? "the health-check program failed (no output)" : output);
    st = lines.status();
  }
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

}  // namespace gpupool::runtime
