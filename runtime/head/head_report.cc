#include "runtime/head/head_report.h"

#include "runtime/head/rpc_connection.h"
#include "runtime/rpc/lease_codec.h"

namespace gpupool::runtime {

absl::StatusOr<std::string> FetchHeadReport(const std::string& host, uint16_t port, const std::string& token) {
  std::string report;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = host, .port = port},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.describeRequest();
        req.setToken(token);
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) report = resp.getReport();
        return st;
      });
  if (!c.ok()) return c.status();
  return report;
}

absl::StatusOr<std::string> FetchHeadUsage(const std::string& host, uint16_t port, const std::string& token,
                                           double from_s, double to_s, const std::string& group_by) {
  std::string report;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = host, .port = port},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.usageRequest();
        req.setToken(token);
        req.setFromS(from_s);
        req.setToS(to_s);
        req.setGroupBy(group_by);
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) report = resp.getReport();
        return st;
      });
  if (!c.ok()) return c.status();
  return report;
}

}  // namespace gpupool::runtime
