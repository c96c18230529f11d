#include "runtime/service/diagnostic_holds.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpupool::runtime {
namespace {

constexpr absl::string_view kDiagnosticRequestPrefix = "_pool/diagnostic/";

}  // namespace

bool IsDiagnosticLease(const std::string& team, const std::string& request_id) {
  return team == kPoolTeam && absl::StartsWith(request_id, kDiagnosticRequestPrefix);
}

const pool::Lease& DiagnosticHolds::Begin(const pool::GpuRef& gpu, const std::string& group, LeaseListener* listener,
                                          int64_t now_s) {
  pool::Lease lease;
  // "<request id>#<n>" as the scheduler's own ids; the request names the GPU it tests.
  lease.request.id = absl::StrCat(kDiagnosticRequestPrefix, gpu.node, "/", gpu.index, "@", run_);
  lease.id = absl::StrCat(lease.request.id, "#", next_++);
  lease.request.team = kPoolTeam;
  lease.request.workload_class = kDiagnosticsWorkload;
  lease.gpus = {gpu};
  lease.group = group;
  lease.milli = 1000;  // the whole GPU: charged so, though no quota is
  lease.started_s = now_s;
  lease.last_checkpoint_s = now_s;
  std::string id = lease.id;
  return holds_.emplace(id, Hold{std::move(lease), listener}).first->second.lease;
}

std::optional<DiagnosticHolds::Hold> DiagnosticHolds::End(const std::string& lease_id) {
  auto it = holds_.find(lease_id);
  if (it == holds_.end()) return std::nullopt;
  Hold hold = std::move(it->second);
  holds_.erase(it);
  return hold;
}

bool DiagnosticHolds::Holds(const pool::GpuRef& gpu) const {
  for (const auto& [id, hold] : holds_) {
    if (hold.lease.gpus.front() == gpu) return true;
  }
  return false;
}

}  // namespace gpupool::runtime
