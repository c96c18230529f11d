// File: runtime/tasks/remote_leases.h
//
// Leases on nodes where this process is not: their tasks run in the job's worker on that node
// (runtime/tasks/worker_pool.h). The lease's thread takes its shape's tasks from the queue as it
// would for a local lease, sends them to the worker in batches with their inputs, and keeps up
// to a window of them in flight; the worker runs them one after another on its own thread for the
// lease and sends back each outcome, which is settled here as a local run's would be (the result
// resolved, a failure raised, a stopped run queued again). A revoked or lost lease is passed on to
// the worker (its running task stops at its next safe point; tasks it had not started come back
// unrun). A worker that dies takes its running tasks with it: they count as lost leases (against
// max_retries) and run again wherever the job gets its next lease, a fresh worker included.
//
// Owned by JobRuntime, beside the Executor (whose Settle and FailTask it calls).
//
// Thread-safety: thread-safe. RunLeaseTasks runs on lease threads; OnOutcomes and OnLost on a
// worker connection's reader thread. mu_ guards the tasks in flight and the leases' counts; it is
// never held while settling a task or sending.
#ifndef GPUPOOL_RUNTIME_TASKS_REMOTE_LEASES_H_
#define GPUPOOL_RUNTIME_TASKS_REMOTE_LEASES_H_

#include <atomic>
#include <cstdint>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/sync/mutex.h"
#include "runtime/tasks/executor.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/tasks/remote_objects.h"
#include "runtime/tasks/runtime_events.h"
#include "runtime/tasks/worker_pool.h"

namespace gpupool::runtime {

class RemoteLeases {
 public:
  struct Deps {
    Executor* executor = nullptr;
    const RuntimeEvents* events = nullptr;
    std::string job_id;               // names the tasks' checkpoint keys
    int64_t lease_linger_ms = 0;      // as for local leases
    const std::atomic<bool>* stopping = nullptr;  // JobRuntime's: set once, when it shuts down
  };
  explicit RemoteLeases(Deps deps);

  // Set once, before the first lease (the pool's handlers call this object, so it is made first).
  void set_workers(WorkerPool* workers) { workers_ = workers; }
  // Where results a worker keeps are recorded (set once, before set_workers).
  void set_objects(RemoteObjects* objects) { objects_ = objects; }

  // A lease thread's work for a lease on another node (LeaseManager::Deps::run_tasks).
  void RunLeaseTasks(LeaseRun* run) ABSL_LOCKS_EXCLUDED(mu_);

  // WorkerPool's handlers.
  void OnOutcomes(WorkerConnection& from, std::vector<wire::Outcome> outcomes) ABSL_LOCKS_EXCLUDED(mu_);
  void OnLost(WorkerConnection& gone, const absl::Status& why, bool bye) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct LeaseState {
    LeaseRun* run = nullptr;
    WorkerConnection* worker = nullptr;
    int in_flight = 0;        // guarded by mu_
    bool worker_gone = false;  // guarded by mu_
  };
  struct InFlight {
    Task* task;
    LeaseState* lease;
  };

  // The task as the worker gets it; false (the task failed here) when an input cannot be encoded.
  bool Describe(Task* task, const std::string& options, const WorkerConnection& to, wire::TaskToRun& out);
  // The outcome `from` sent, as the executor settles it (a result it keeps is recorded with objects_).
  RunOutcome Outcome(Task* task, WorkerConnection& from, wire::Outcome&& o);
  // Waits until the lease has nothing in flight, passing on a loss that happens meanwhile; when
  // the job shuts down, for kShutdownGrace at most.
  void Drain(LeaseState& state) ABSL_LOCKS_EXCLUDED(mu_);
  // Settles the lease's tasks still in flight as cancelled (the job shut down).
  void Abandon(LeaseState& state) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes out of in_flight_ the entries `which` picks, for the caller to settle.
  std::vector<InFlight> TakeInFlight(const std::function<bool(const InFlight&)>& which)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles a task taken out of in_flight_ and counts it down on its lease.
  void SettleInFlight(const InFlight& f, RunOutcome outcome) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr std::chrono::seconds kShutdownGrace{2};

  Executor& executor_;
  const RuntimeEvents& events_;
  const std::string job_id_;
  const int64_t lease_linger_ms_;
  WorkerPool* workers_ = nullptr;
  RemoteObjects* objects_ = nullptr;
  const std::atomic<bool>* stopping_;  // may be null (tests): never

  Mutex mu_;
  CondVar cv_;
  std::map<uint64_t, InFlight> in_flight_ ABSL_GUARDED_BY(mu_);  // by task id
  std::set<LeaseState*> leases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_REMOTE_LEASES_H_
