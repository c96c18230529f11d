#include "runtime/agent/agent_control.h"

#include <string>
#include <utility>

#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/worker_launch_codec.h"

namespace gpupool::runtime {

kj::Promise<void> AgentControl::startWorker(StartWorkerContext context) {
  auto params = context.getParams();
  absl::StatusOr<WorkerLaunch> launch = rpc::DecodeWorkerLaunch(params.getLaunch());
  if (!launch.ok()) {
    rpc::EncodeStatus(launch.status(), context.getResults().initStatus());
    return kj::READY_NOW;
  }
  // Answered from the launcher's thread into this loop; a call dropped meanwhile (the head went)
  // drops the promise, and the fulfiller then fulfills nothing.
  auto answer = kj::newPromiseAndCrossThreadFulfiller<absl::StatusOr<int>>();
  launcher_.StartAsync(*std::move(launch), params.getRunAs(), params.getTeam(),
                       [fulfiller = kj::mv(answer.fulfiller)](absl::StatusOr<int> pid) mutable {
                         fulfiller->fulfill(std::move(pid));
                       });
  return answer.promise.then([context](absl::StatusOr<int> pid) mutable {
    auto results = context.getResults();
    rpc::EncodeStatus(pid.status(), results.initStatus());
    if (pid.ok()) results.setPid(*pid);
  });
}

kj::Promise<void> AgentControl::stopJob(StopJobContext context) {
  launcher_.StopJob(context.getParams().getJob());
  return kj::READY_NOW;
}

kj::Promise<void> AgentControl::stopDiagnostic(StopDiagnosticContext context) {
  diagnostic_.Interrupt(context.getParams().getLeaseId(), context.getParams().getWhy());
  return kj::READY_NOW;
}

}  // namespace gpupool::runtime
