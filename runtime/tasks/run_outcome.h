// File: runtime/tasks/run_outcome.h
//
// What one run of a task came to, before the job settles it (Executor::Run makes one, Settle
// acts on it). Apart so a run can happen in one process and be settled in another: a worker
// process runs the task on its node and sends the outcome to the driver that owns the task
// (runtime/tasks/worker_host.h, remote_leases.h).
#ifndef GPUPOOL_RUNTIME_TASKS_RUN_OUTCOME_H_
#define GPUPOOL_RUNTIME_TASKS_RUN_OUTCOME_H_

#include <cstdint>
#include <memory>
#include <string>

#include "gpupool/error.h"
#include "gpupool/internal/object_header.h"

namespace gpupool::runtime {

struct RunOutcome {
  enum class Kind {
    kDone,       // `value` is the result (or it is kept elsewhere: value_elsewhere)
    kFailed,     // the function threw (or could not be called): code, message, cause
    kCancelled,  // cancelled before or while it ran: message says which
    kStopped,    // its lease was revoked or lost mid-run: it runs again elsewhere
    kNotRun,     // handed back unstarted (its lease stopped first): queued again, no attempt used
  };
  Kind kind = Kind::kFailed;
  std::unique_ptr<detail::ValueBox> value;
  // kDone: the worker that ran it keeps the result, and the result's entry was marked so
  // (runtime/tasks/remote_objects.h): settling leaves it pending, to be fetched when needed.
  bool value_elsewhere = false;
  ErrorCode code = ErrorCode::kUnknown;
  std::string message;
  std::string cause;
  std::string location;  // where it ran: "node-0/GPU 1", "cpu", "node-1/GPU 0 (worker pid 42)"
  // Accounting: pool microseconds x GPUs the run was busy, and (kStopped) the part of it thrown
  // away since its last snapshot.
  int64_t busy_gpu_micros = 0;
  int64_t lost_gpu_micros = 0;
  // kStopped: the lease was lost without a snapshot, so the run counts against max_retries; and
  // how it resumes, for the task-preempted event.
  bool system_failure = false;
  std::string resume_note;
  std::string lease_id;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_RUN_OUTCOME_H_
