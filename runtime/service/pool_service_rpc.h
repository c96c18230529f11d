// File: runtime/service/pool_service_rpc.h
//
// The head's bootstrap capability (rpc::PoolService), what every connection gets first: a job
// authenticates as a team and gets its JobSession, a node agent registers its node and gets its
// AgentSession, and a holder of the operators', a team's or the agents' token reads the pool's
// report and the usage ledger (a team's token its own rows only: head_auth.h). (Named for the RPC interface it serves; PoolService is the pool's core.)
// Internal to the service's RPC server.
//
//   bootstrap = capnp::Capability::Client(kj::heap<PoolServiceRpc>(session_deps, agents));
//
// Threads: the server's loop thread only. Holds no state of its own.
#ifndef GPUPOOL_RUNTIME_SERVICE_POOL_SERVICE_RPC_H_
#define GPUPOOL_RUNTIME_SERVICE_POOL_SERVICE_RPC_H_

#include <kj/async.h>

#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/service/agent_registry.h"
#include "runtime/service/job_session.h"

namespace gpupool::runtime {

class PoolServiceRpc final : public rpc::PoolService::Server {
 public:
  // Both outlive it (the server owns them and drops this capability before they go).
  PoolServiceRpc(const JobSessionDeps& sessions, AgentRegistry& agents) : deps_(sessions), agents_(agents) {}

  kj::Promise<void> authenticate(AuthenticateContext context) override;
  kj::Promise<void> registerAgent(RegisterAgentContext context) override;
  kj::Promise<void> usage(UsageContext context) override;
  kj::Promise<void> describe(DescribeContext context) override;
  kj::Promise<void> savings(SavingsContext context) override;
  // The operators' token only (gpu_operations_rpc.cc).
  kj::Promise<void> operateGpus(OperateGpusContext context) override;

 private:
  const JobSessionDeps deps_;
  AgentRegistry& agents_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_POOL_SERVICE_RPC_H_
