// File: runtime/agent/agent_control.h
//
// The capability a node agent hands the head when it registers (rpc::AgentControl): the head's
// word to start a worker of a job, or to stop a job's workers, reaches the agent's
// WorkerLauncher (runtime/agent/worker_launcher.h) through it. Agent-internal: the KJ half of
// NodeAgent, included by node_agent.cc only.
//
//   req.setControl(kj::heap<AgentControl>(launcher));   // in registerAgent, on the loop thread
//
// Threads: called on the agent connection's loop thread; a start is answered there once the
// launcher's thread has started the worker (the loop does not wait for the fork and exec).
#ifndef GPUPOOL_RUNTIME_AGENT_AGENT_CONTROL_H_
#define GPUPOOL_RUNTIME_AGENT_AGENT_CONTROL_H_

#include <kj/async.h>

#include "runtime/agent/worker_launcher.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

class AgentControl final : public rpc::AgentControl::Server {
 public:
  // `launcher` outlives the capability (the agent drops its connection before the launcher).
  explicit AgentControl(WorkerLauncher& launcher) : launcher_(launcher) {}

  kj::Promise<void> startWorker(StartWorkerContext context) override;
  kj::Promise<void> stopJob(StopJobContext context) override;

 private:
  WorkerLauncher& launcher_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_AGENT_CONTROL_H_
