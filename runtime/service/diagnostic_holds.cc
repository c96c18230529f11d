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

const pool::Lease& DiagnosticHolds::Begin(const pool::GpuRef& gpu, const std::string& group, int64_t now_s) {
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
  return holds_.emplace(id, std::move(lease)).first->second;
}

std::optional<pool::Lease> DiagnosticHolds::End(const std::string& lease_id) {
  auto it = holds_.find(lease_id);
  if (it == holds_.end()) return std::nullopt;
  pool::Lease lease = std::move(it->second);
  holds_.erase(it);
  return lease;
}

bool DiagnosticHolds::Holds(const pool::GpuRef& gpu) const {
  for (const auto& [id, lease] : holds_) {
    if (lease.gpus.front() == gpu) return true;
  }
  return false;
}

}  // namespace gpupool::runtime
