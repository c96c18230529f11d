#include "runtime/client/gpu_operations.h"

#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::runtime {

absl::StatusOr<std::string> OperateHeadGpus(const std::string& host, uint16_t port, const std::string& token,
                                            const GpuOperation& op) {
  std::string report;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = host, .port = port},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.operateGpusRequest();
        req.setToken(token);
        req.setAction(op.action);
        req.setNode(op.node);
        req.setGpuIndex(op.gpu);
        req.setReason(op.reason);
        req.setWho(op.who);
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) report = resp.getReport();
        return st;
      });
  if (!c.ok()) return c.status();
  return report;
}

}  // namespace gpupool::runtime
