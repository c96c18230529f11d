#include "runtime/client/head_report.h"

#include "runtime/rpc/rpc_connection.h"
#include "runtime/rpc/lease_codec.h"

namespace gpupool::runtime {
namespace {

// One question to the head whose answer is a status and a text report. `build` makes the
// request from the head's bootstrap capability.
template <typename Build>
absl::StatusOr<std::string> AskHead(const std::string& host, uint16_t port, Build build) {
  std::string report;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = host, .port = port},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto resp = build(head).send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) report = resp.getReport();
        return st;
      });
  if (!c.ok()) return c.status();
  return report;
}

}  // namespace

absl::StatusOr<std::string> FetchHeadReport(const std::string& host, uint16_t port, const std::string& token) {
  return AskHead(host, port, [&](rpc::PoolService::Client& head) {
    auto req = head.describeRequest();
    req.setToken(token);
    return req;
  });
}

absl::StatusOr<std::string> FetchHeadUsage(const std::string& host, uint16_t port, const std::string& token,
                                           double from_s, double to_s, const std::string& group_by,
                                           bool idle_share) {
  return AskHead(host, port, [&](rpc::PoolService::Client& head) {
    auto req = head.usageRequest();
    req.setToken(token);
    req.setFromS(from_s);
    req.setToS(to_s);
    req.setGroupBy(group_by);
    req.setIdleShare(idle_share);
    return req;
  });
}

absl::StatusOr<std::string> FetchHeadSavings(const std::string& host, uint16_t port, const std::string& token,
                                             double from_s, double to_s) {
  return AskHead(host, port, [&](rpc::PoolService::Client& head) {
    auto req = head.savingsRequest();
    req.setToken(token);
    req.setFromS(from_s);
    req.setToS(to_s);
    return req;
  });
}

}  // namespace gpupool::runtime
