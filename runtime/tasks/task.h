// File: runtime/tasks/task.h
//
// One submitted task and the shape of resources it runs on (with that shape's counters). A Task is created by Submit, waits for
// its dependencies, sits in its shape's queue, runs on a worker, and is deleted once its result is
// resolved; or, when a worker keeps its result, kept as that result's lineage until the driver
// reads it or drops it (runtime/tasks/remote_objects.h). Memory per queued task is the Task
// itself plus its result entry (a few hundred bytes).
#ifndef GPUPOOL_RUNTIME_TASKS_TASK_H_
#define GPUPOOL_RUNTIME_TASKS_TASK_H_

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gpupool/remote.h"
#include "gpupool/task_options.h"
#include "pool/scheduler/lease_request.h"
#include "runtime/objects/object_store.h"

namespace gpupool::runtime {

class ShapeQueue;

// Per shape, for Stats(). Atomics: updated by workers without locks.
struct ShapeCounters {
  std::atomic<uint64_t> tasks_run{0};
  std::atomic<uint64_t> tasks_failed{0};
  std::atomic<int64_t> busy_gpu_micros{0};  // pool microseconds x GPUs
  std::atomic<int64_t> lost_gpu_micros{0};  // work done since the last snapshot, thrown away
  std::atomic<uint64_t> preemptions{0};     // runs stopped by a revoked or lost lease
  std::atomic<uint64_t> snapshots{0};       // snapshots committed
};

// Options interned once per distinct TaskOptions: what every task of that kind shares.
struct TaskShape {
  TaskOptions options;
  std::string team;            // resolved (options.team or the runtime's default)
  bool cpu = true;             // gpus == 0: no lease
  pool::LeaseRequest request;  // the lease a GPU shape asks for (id filled per request)
  absl::Status refused;        // set when the pool refused this shape for good
  double checkpoint_interval_s = 0;  // the priority class's forced interval (pool s); 0: none
  ShapeQueue* queue = nullptr;
  ShapeCounters counters;
};

struct Task {
  uint64_t id = 0;
  const detail::FunctionInfo* function = nullptr;
  TaskShape* shape = nullptr;
  std::string args;
  std::vector<detail::ObjectHeader*> deps;    // retained; positional dependencies
  std::vector<detail::ObjectHeader*> nested;  // retained; kept alive only
  ObjectEntry* result = nullptr;              // retained by the task
  int attempt = 0;
  int system_failures = 0;  // lost leases; preemptions are not failures (max_retries)
  // Set when the task first becomes checkpointable: CheckpointKey(job, id), its key in the
  // checkpoint store (a later run of the task resumes from what was committed under it).
  std::unique_ptr<std::string> checkpoint_key;
  // Another process's key for this same work (a task rebuilt from the lineage of a dead rank's
  // object): the first run resumes from the newest snapshot committed there, when the checkpoint
  // directory is one both can read. Never written to: this task snapshots under its own key.
  std::string resume_from;
  // Dependencies still pending, plus one held by Submit until it has registered them all.
  std::atomic<int> unresolved{1};
  std::atomic<bool> cancelled{false};
  std::atomic<bool> dependency_failed{false};
  std::exception_ptr dependency_failure;  // written once, by whoever set dependency_failed
  Task* next = nullptr;                   // intrusive queue link

  const std::string& name() const {
    return shape->options.name.empty() ? function->name : shape->options.name;
  }
};

// Frees a task whose result is no longer its own (settled, or never retained): releases the
// inputs it holds (its dependencies and nested refs). Finish's end for a task, and a kept
// lineage's (runtime/tasks/remote_objects.h) when its result no longer needs it.
inline void DeleteTaskReleasingInputs(Task* task) {
  for (detail::ObjectHeader* h : task->deps) detail::Release(h);
  for (detail::ObjectHeader* h : task->nested) detail::Release(h);
  delete task;
}

// The checkpoint store key of task `task_id` of job `job_id`: "<job>.task-<id>". The job id names
// the process (host, pid and 32 random bits), so keys never collide in a directory several nodes
// share.
inline std::string CheckpointKey(std::string_view job_id, uint64_t task_id) {
  return std::string(job_id) + ".task-" + std::to_string(task_id);
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_TASK_H_
