// File: runtime/tasks/submits_to_driver.h
//
// GPU tasks that a worker's tasks submit (Ray's nested tasks), sent to the driver. The worker
// leases nothing itself (its pool client refuses); the driver, which owns every task and object of
// the job, submits each as its own (wire::Submit) and answers with its result's id
// (wire::Submitted), which the worker then imports like any of the driver's objects: borrowed,
// fetched when read (runtime/tasks/driver_imports.h). So such a task is placed anywhere in the
// pool, counted against the job's team, retried and checkpointed as the driver's own tasks are.
//
// Thread-safety: thread-safe. Submit blocks its caller (a task's thread) for the driver's answer;
// OnSubmitted runs on the worker's serving thread. mu_ is never held while sending.
#ifndef GPUPOOL_RUNTIME_TASKS_SUBMITS_TO_DRIVER_H_
#define GPUPOOL_RUNTIME_TASKS_SUBMITS_TO_DRIVER_H_

#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime {

class SubmitsToDriver {
 public:
  explicit SubmitsToDriver(FrameSocket* driver) : driver_(driver) {}

  // Sends the submission (its request filled in here) and waits for the driver's answer: the
  // result's id, lent to this worker until it borrows it; or why the driver refused it, or why
  // it never answered (the worker is stopping).
  absl::StatusOr<uint64_t> Submit(wire::Submit message) ABSL_LOCKS_EXCLUDED(mu_);
  // The driver's answer (the serving thread).
  void OnSubmitted(const wire::Submitted& answer) ABSL_LOCKS_EXCLUDED(mu_);
  // The worker stops serving: submissions waiting for an answer fail with `why`, new ones at once.
  void Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiting {
    bool answered = false;
    wire::Submitted answer;
  };
  FrameSocket* const driver_;
  Mutex mu_;
  CondVar cv_;
  absl::Status stopped_ ABSL_GUARDED_BY(mu_);  // set by Stop
  uint64_t last_request_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Waiting*> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_SUBMITS_TO_DRIVER_H_
