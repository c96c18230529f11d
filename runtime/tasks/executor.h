// File: runtime/tasks/executor.h
//
// Runs the job's tasks: takes a submitted task (Admit), waits for its dependencies, queues it on
// its shape's queue (asking the LeaseManager for leases when it needs a GPU), runs it on a CPU
// worker or on a lease's worker, and resolves its result (Finish), which may make tasks that
// waited for it runnable. A run stopped by its lease going away is accounted (Preempted) and the
// task queued again (Requeue), up to max_retries for lost leases; a failure becomes a TaskError.
// Where tasks run in workers (RunTasksInWorkers), a task waits at run time for inputs still on
// their way (AwaitInputs), and a finished task whose result a worker kept stays as its lineage,
// run again (Rebuild) when that worker dies.
//
//   - CPU tasks (Gpus(0)) run on the CPU workers (StartCpuWorkers), in batches from the CPU queue.
//   - Each lease's thread (started by the LeaseManager) runs RunLeaseTasks: its shape's tasks one
//     after another, until the lease stops or has idled for lease_linger_ms.
//
// Owned by JobRuntime; the other parts it uses (Deps) are JobRuntime's and outlive it.
//
// Thread-safety: thread-safe; it holds no lock of its own. Dependency counting is lock-free
// (Task::unresolved with acq_rel, dependency_failed/dependency_failure published by a
// compare-exchange and read after the acquire); queues and the store lock inside themselves.
// Called by JobRuntime (Admit, DependencyResolved from Cancel and the object exchange, shutdown),
// the LeaseManager's lease threads (RunLeaseTasks) and its refusals (FailTask), and RemoteObjects
// (Rebuild, on a worker connection's reader thread).
#ifndef GPUPOOL_RUNTIME_TASKS_EXECUTOR_H_
#define GPUPOOL_RUNTIME_TASKS_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gpupool/error.h"
#include "runtime/client/pool_client.h"
#include "runtime/objects/object_store.h"
#include "runtime/tasks/checkpoint_coordinator.h"
#include "runtime/tasks/lease_manager.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/tasks/run_outcome.h"
#include "runtime/tasks/runtime_events.h"
#include "runtime/tasks/task.h"
#include "runtime/tasks/task_shapes.h"

namespace gpupool::runtime {

// Why a task whose dependency failed with `failure` fails ("a dependency failed: …"), and the
// original exception's cause to travel on (as Ray's dependants re-raise it); the task fails kAborted.
void DescribeDependencyFailure(std::exception_ptr failure, std::string* why, std::string* cause);

class JobRuntime;
class RemoteObjects;

// The exception a task's result fails with: "task '<name>' (task <id>, attempt <n>) on
// <location>: <message>", as a TaskError carrying `cause` (the original exception's description).
std::exception_ptr MakeTaskError(ErrorCode code, const std::string& task_name, uint64_t task_id,
                                 int attempt, const std::string& location,
                                 const std::string& message, const std::string& cause = {});

class Executor {
 public:
  // Not owned; all outlive the Executor.
  struct Deps {
    JobRuntime* runtime = nullptr;  // what a running task's TaskContext reaches (TaskState::runtime)
    PoolClient* pool = nullptr;     // pool time
    ObjectStore* store = nullptr;   // task results
    TaskShapes* shapes = nullptr;   // the queues
    LeaseManager* leases = nullptr;
    CheckpointCoordinator* checkpoints = nullptr;
    const RuntimeEvents* events = nullptr;
    const std::atomic<bool>* stopping = nullptr;  // JobRuntime's: set once, when it shuts down
    double clock_speed = 1;       // pool seconds per real second (busy GPU time)
    int64_t lease_linger_ms = 0;  // how long an idle lease waits for its shape's next task
  };
  explicit Executor(Deps deps);

  // Starts `workers` CPU worker threads; called once, by JobRuntime::Start.
  void StartCpuWorkers(int workers);
  // Tasks may run in workers from now on (set once, before the first task), and `keeper` keeps
  // the lineage of the results workers keep (see below). What changes:
  //   - a task also waits for the refs nested in its arguments to be made (not their success: a
  //     failed one is the task's to read) before it runs: a worker's task reading a nested ref
  //     whose producer queued behind it on the same lease (or in the window sent ahead to its
  //     worker) would wait for ever;
  //   - a GPU task's inputs need only be made, not here: a value a worker keeps (an entry marked
  //     remote) is not fetched to this process for the task. The worker that runs it gets it
  //     from where it is (RemoteLeases::Describe, runtime/tasks/task_inputs.h); a task that runs
  //     here reads it through the store, which fetches it then.
  //   - lineage (Ray's lineage reconstruction): a finished task whose result a worker kept is
  //     offered to `keeper` instead of freed (RemoteObjects::KeepLineage); when that worker goes,
  //     the keeper hands it back to Rebuild to make the result again.
  void RunTasksInWorkers(RemoteObjects* keeper) { lineage_keeper_.store(keeper, std::memory_order_release); }
  // Runs again finished tasks kept as lineage, whose results' only copies went with their
  // worker: each with its result's entry, still pending, retained for the task. Each run counts
  // as a retry of a lost run (against max_retries). All of them are pending results again before
  // any is admitted, so one that reads another's result waits for it to be made rather than
  // being sent for it. Says, in order, why a task is not run again (none left, the runtime
  // stopping): that task and its result's reference stay the caller's.
  std::vector<absl::Status> Rebuild(const std::vector<std::pair<Task*, ObjectEntry*>>& lost);

  // Takes over a task Submit made (its result entry and shape set): it fails at once when the
  // runtime is stopping or its shape was refused, else runs once its dependencies resolve.
  void Admit(Task* task);
  // One of the task's dependencies resolved (completed or failed); may make it runnable.
  void DependencyResolved(Task* task, ObjectEntry* dependency);
  // How many objects `t` waits for before it runs: its dependencies, and its nested refs when
  // RunTasksInWorkers was called.
  size_t Waits(const Task* t) const;
  // Resolves the task's result with the error (counted as a failure unless kCancelled).
  void FailTask(Task* task, ErrorCode code, const std::string& location, const std::string& message,
                const std::string& cause = {});
  // A lease thread's work (LeaseManager::Deps::run_tasks).
  void RunLeaseTasks(LeaseRun* run);
  // Runs the task once on `lease` (null: a CPU task) in this process and says how it went,
  // settling nothing: the task is still the caller's. What a worker process does with the tasks
  // its driver sends it (runtime/tasks/worker_host.h).
  RunOutcome Run(Task* task, LeaseRun* lease);
  // Acts on a run's outcome: resolves the result, fails it, or queues it again (a stopped run,
  // within max_retries for lost leases); accounts busy and lost GPU time. Takes the task.
  void Settle(Task* task, RunOutcome outcome);
  // Queues a task whose dependencies are resolved.
  void Enqueue(Task* task);
  // Queues again a task handed back unrun or stopped; one whose input is being made again since
  // it became runnable (ObjectEntry::BeingRemade: its keeper died) waits for it first, unleased.
  void Requeue(Task* task);
  // Submitted tasks still waiting for an input (Stats).
  int64_t waiting_for_dependencies() const { return waiting_for_dependencies_.load(std::memory_order_relaxed); }

  // Shutdown, once `stopping` is set and the queues woken: JoinCpuWorkers, then (after the lease
  // workers are joined too) Drain, which fails every queued task and, from then on, every task
  // that becomes runnable.
  void JoinCpuWorkers();
  void Drain();

 private:
  // A task's inputs may still be on their way when it is taken to run (a value a worker keeps,
  // fetched for it: RunTasksInWorkers). Waits for them before the task starts, so the wait is
  // not counted as the task's run; false (with `out` filled) when its lease stopped meanwhile or
  // an input is being made again (kNotRun: see Requeue), it was cancelled, or an input failed
  // (kAborted, as for any failed dependency).
  bool AwaitInputs(Task* task, LeaseRun* lease, RunOutcome* out);
  void MakeRunnable(Task* task);  // its dependencies are all resolved
  void CpuWorker();
  void Execute(Task* task, LeaseRun* lease);  // Run, then Settle
  // Fills in a run stopped by its lease going away: the GPU-seconds of work lost since its last
  // snapshot, and whether it counts as a system failure (against max_retries): a lost lease,
  // unless the task had already stopped with its snapshot before the grace period ran out.
  void StoppedRun(LeaseRun* lease, const detail::TaskState& state, RunOutcome& out);
  // Resolves the task's result and frees the task; schedules whoever waited for the result.
  // `value_elsewhere`: done, with the result kept by a worker (its entry stays pending); the
  // task is then kept as the result's lineage when the keeper takes it (RunTasksInWorkers).
  void Finish(Task* task, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure,
              bool value_elsewhere = false);

  // Constant after construction.
  JobRuntime* const runtime_;
  PoolClient& pool_;
  ObjectStore& store_;
  TaskShapes& shapes_;
  LeaseManager& leases_;
  CheckpointCoordinator& checkpoints_;
  const RuntimeEvents& events_;
  // Set by RunTasksInWorkers: tasks may run in workers exactly when there is a keeper.
  std::atomic<RemoteObjects*> lineage_keeper_{nullptr};
  bool in_workers() const { return lineage_keeper_.load(std::memory_order_acquire) != nullptr; }
  const std::atomic<bool>& stopping_;
  const double clock_speed_;
  const int64_t lease_linger_ms_;

  // Set by StartCpuWorkers before the first worker starts; joined by JoinCpuWorkers.
  size_t cpu_workers_ = 1;
  std::vector<std::thread> cpu_threads_;

  std::atomic<int64_t> waiting_for_dependencies_{0};  // submitted, inputs not all there yet
  std::atomic<bool> drained_{false};  // workers are gone: new runnable tasks fail at once
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_EXECUTOR_H_
