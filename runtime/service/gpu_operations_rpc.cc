// PoolServiceRpc::operateGpus: an operator drains, resumes or vouches for the repair of GPUs
// (`gpupool gpu drain|resume|repaired`, `gpupool node drain|resume`). Only the operators' token
// may; the agents' token, which also sees the whole pool, may not: an agent reports, it does not
// decide.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/service/pool_service_rpc.h"

namespace gpupool::runtime {

kj::Promise<void> PoolServiceRpc::operateGpus(OperateGpusContext context) {
  auto p = context.getParams();
  auto results = context.getResults();
  auto fail = [&](absl::Status st) {
    rpc::EncodeStatus(st, results.initStatus());
    return kj::READY_NOW;
  };
  std::optional<Viewer> viewer = deps_.auth.Identify(p.getToken());
  if (!viewer.has_value() || viewer->kind != Viewer::Kind::kOperator) {
    return fail(absl::PermissionDeniedError(
        "draining, resuming and repairing GPUs needs the operators' token (the 'operators:' line of the "
        "head's tokens file); a team's or the agents' token may only read"));
  }
  for (const capnp::Text::Reader t : {p.getAction(), p.getNode(), p.getReason(), p.getWho()}) {
    if (t.size() > rpc::kMaxTextBytes) return fail(absl::InvalidArgumentError("a field is longer than 4096 bytes"));
  }
  std::optional<pool::OperatorAction> action = pool::ParseOperatorAction(p.getAction());
  if (!action.has_value()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("unknown action '", p.getAction().cStr(), "' (drain, resume or repaired)")));
  }
  if (p.getGpuIndex() < -1) return fail(absl::InvalidArgumentError(absl::StrCat("no GPU index ", p.getGpuIndex())));
  std::optional<int> gpu;
  if (p.getGpuIndex() >= 0) gpu = p.getGpuIndex();
  std::string who = p.getWho();
  if (who.empty()) who = "operator";
  absl::StatusOr<std::vector<std::string>> lines =
      deps_.pool.Operate(p.getNode(), gpu, *action, who, p.getReason());
  if (!lines.ok()) return fail(lines.status());
  results.setReport(absl::StrJoin(*lines, "\n"));
  rpc::EncodeStatus(absl::OkStatus(), results.initStatus());
  return kj::READY_NOW;
}

}  // namespace gpupool::runtime
