// File: runtime/agent/agent_control.h
//
// The capability a node agent hands the head when it registers (rpc::AgentControl): the head's
// word to start a worker of a job, or to stop a job's workers, reaches the agent's
// WorkerLauncher (runtime/agent/worker_launcher.h) through it, and its word to stop a diagnostic
// the agent's RunningDiagnostic (runtime/agent/diagnostics.h). Agent-internal: the KJ half of
// NodeAgent, included by node_agent.cc only.
//
//   req.setControl(kj::heap<AgentControl>(launcher));   // in registerAgent, on the loop thread
//
// Threads: called on the agent connection's loop thread; a start is answered there once the
// launcher's thread has started the worker (the loop does not wait for the fork and exec).
#ifndef GPUPOOL_RUNTIME_AGENT_AGENT_CONTROL_H_
#define GPUPOOL_RUNTIME_AGENT_AGENT_CONTROL_H_

#include <kj/async.h>

#include "runtime/agent/diagnostics.h"
#include "runtime/agent/worker_launcher.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

class AgentControl final : public rpc::AgentControl::Server {
 public:
  // `launcher` and `diagnostic` outlive the capability (the agent drops its connection first).
  AgentControl(WorkerLauncher& launcher, RunningDiagnostic& diagnostic)
      : launcher_(launcher), diagnostic_(diagnostic) {}

  kj::Promise<void> startWorker(StartWorkerContext context) override;
  kj::Promise<void> stopJob(StopJobContext context) override;
  kj::Promise<void> stopDiagnostic(StopDiagnosticContext context) override;

 private:
  WorkerLauncher& launcher_;
  RunningDiagnostic& diagnostic_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_AGENT_CONTROL_H_
