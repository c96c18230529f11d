#include "runtime/service/pool_service_rpc.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/service/head_report_json.h"

namespace gpupool::runtime {

kj::Promise<void> PoolServiceRpc::authenticate(AuthenticateContext context) {
  auto params = context.getParams();
  absl::Status st;
  if (params.getTeam().size() > rpc::kMaxTextBytes || params.getToken().size() > rpc::kMaxTextBytes ||
      params.getJobKey().size() > rpc::kMaxTextBytes) {
    st = absl::InvalidArgumentError("team, token or job key is longer than 4096 bytes");
  } else {
    st = deps_.auth.Authenticate(params.getTeam(), params.getToken());
  }
  auto results = context.getResults();
  rpc::EncodeStatus(st, results.initStatus());
  if (st.ok()) {
    results.setSession(kj::heap<JobSession>(deps_, params.getTeam(), params.getToken(), params.getJobKey()));
  }
  return kj::READY_NOW;
}

kj::Promise<void> PoolServiceRpc::registerAgent(RegisterAgentContext context) {
  auto params = context.getParams();
  auto results = context.getResults();
  absl::Status st = params.getToken().size() > rpc::kMaxTextBytes
                        ? absl::InvalidArgumentError("token is longer than 4096 bytes")
                        : deps_.auth.AuthenticateAgent(params.getToken());
  if (st.ok()) {
    auto agent = kj::heap<AgentSession>(agents_);
    std::optional<rpc::AgentControl::Client> control;
    if (params.hasControl()) control = params.getControl();  // an agent older than workers sends none
    absl::StatusOr<std::string> node = agents_.Register(params.getInventory(), agent.get(), std::move(control));
    st = node.status();
    if (node.ok()) {
      agent->set_node(*node);
      results.setAgent(kj::mv(agent));
    }
  }
  rpc::EncodeStatus(st, results.initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> PoolServiceRpc::usage(UsageContext context) {
  auto p = context.getParams();
  auto results = context.getResults();
  std::optional<Viewer> viewer = deps_.auth.Identify(p.getToken());
  if (!viewer.has_value()) {
    rpc::EncodeStatus(absl::UnauthenticatedError("usage needs the operators', a team's or the agents' token"),
                      results.initStatus());
    return kj::READY_NOW;
  }
  if (p.getGroupBy().size() > rpc::kMaxTextBytes) {
    rpc::EncodeStatus(absl::InvalidArgumentError("the grouping is longer than 4096 bytes"), results.initStatus());
    return kj::READY_NOW;
  }
  UsageQuery query{.from_s = p.getFromS(), .to_s = p.getToS(), .group_by = p.getGroupBy(), .idle_share = p.getIdleShare()};
  absl::StatusOr<std::string> report = UsageJson(deps_.durable.journal(), deps_.pool, query, *viewer,
                                                deps_.history_interval_s);
  rpc::EncodeStatus(report.status(), results.initStatus());
  if (report.ok()) results.setReport(*report);
  return kj::READY_NOW;
}

kj::Promise<void> PoolServiceRpc::describe(DescribeContext context) {
  auto results = context.getResults();
  std::optional<Viewer> viewer = deps_.auth.Identify(context.getParams().getToken());
  if (!viewer.has_value()) {
    rpc::EncodeStatus(absl::UnauthenticatedError("describe needs the operators', a team's or the agents' token"),
                      results.initStatus());
    return kj::READY_NOW;
  }
  results.setReport(HeadReportJson(HeadView{deps_.pool, agents_, deps_.sessions, deps_.durable.kept()}, *viewer));
  rpc::EncodeStatus(absl::OkStatus(), results.initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> PoolServiceRpc::savings(SavingsContext context) {
  auto p = context.getParams();
  auto results = context.getResults();
  std::optional<Viewer> viewer = deps_.auth.Identify(p.getToken());
  if (!viewer.has_value()) {
    rpc::EncodeStatus(absl::UnauthenticatedError("savings needs the operators', a team's or the agents' token"),
                      results.initStatus());
    return kj::READY_NOW;
  }
  absl::StatusOr<std::string> report = SavingsJson(deps_.durable.journal(), deps_.pool, p.getFromS(), p.getToS(), *viewer);
  rpc::EncodeStatus(report.status(), results.initStatus());
  if (report.ok()) results.setReport(*report);
  return kj::READY_NOW;
}

}  // namespace gpupool::runtime
