// File: runtime/tasks/checkpoint_coordinator.h
//
// The checkpoint protocol at a task's safe points (DESIGN §5), and the checkpoint store it
// writes to:
//
//   - MakeCheckpointable (TaskContext::Checkpointable) registers the task's state for this run
//     and, when an earlier run of the same task left a snapshot, loads it into that state and
//     returns its step.
//   - SafePoint (TaskContext::Step) counts a step, then in this order: a lost lease stops the task
//     with no snapshot (the GPU is gone, or the grace period ran out: the task resumes from its
//     previous snapshot); a revoked lease snapshots synchronously, within the grace period, and
//     stops; a cancelled task stops; otherwise a snapshot is staged when the priority class's
//     interval has passed since the last one, and written in the background while the task goes on.
//
// The Executor sees the stopped run, accounts for the work lost since the last snapshot and
// queues the task again; it ends each checkpointable run (EndCheckpointableRun) and forgets a
// finished task's snapshots (Forget).
//
// Owned by JobRuntime, which destroys it after every task has stopped and before the pool client:
// the destructor drains the background writer, whose commit callbacks tell the pool.
//
// Thread-safety: MakeCheckpointable, SafePoint and RestoreState run on the task's own thread and
// touch only its TaskState (and the thread-safe CheckpointService and PoolClient).
// checkpointable_mu_ guards checkpointable_runs_ (a leaf lock: nothing is called under it), so only
// tasks that called Checkpointable pay for it; OverdueTasks reads the runs' last safe point
// through an atomic (TaskState::last_safe_point_pool_s). Errors reach the task as gpupool::Error
// exceptions (TaskContext's contract).
#ifndef GPUPOOL_RUNTIME_TASKS_CHECKPOINT_COORDINATOR_H_
#define GPUPOOL_RUNTIME_TASKS_CHECKPOINT_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpupool/runtime.h"
#include "runtime/client/pool_client.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/checkpoint_service.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/tasks/runtime_events.h"

namespace gpupool::runtime {

class CheckpointCoordinator {
 public:
  struct Deps {
    CheckpointServiceOptions store;  // where snapshots go
    PoolClient* pool = nullptr;      // pool time, and checkpoint notes; outlives this
    const RuntimeEvents* events = nullptr;
    std::string job_id;              // names this process's checkpoint keys (CheckpointKey)
    double clock_speed = 1;          // pool seconds per real second
  };
  explicit CheckpointCoordinator(Deps deps);

  // Throws kFailedPrecondition when called twice in one run; returns the step resumed at (0: a
  // fresh start).
  int64_t MakeCheckpointable(detail::TaskState& state);
  // Throws kAborted when the lease is lost or revoked, kCancelled when the task or its lease was
  // stopped; otherwise returns, maybe having staged a snapshot.
  void SafePoint(detail::TaskState& state);
  // Loads the newest snapshot committed under `key` into the task's registered state; nullopt
  // when there is none.
  std::optional<checkpoint::SnapshotInfo> RestoreState(detail::TaskState& state, const std::string& key);
  void EndCheckpointableRun(detail::TaskState& state);  // the run is over (Executor::Execute)
  // Checkpointable runs that have not reached a safe point for over twice their interval.
  std::vector<OverdueTask> OverdueTasks() const;
  // A finished task's snapshots are no longer needed, here or at the pool.
  void Forget(const std::string& checkpoint_key);

 private:
  // Constant after construction.
  PoolClient& pool_;
  const RuntimeEvents& events_;
  const std::string job_id_;
  const double clock_speed_;

  mutable Mutex checkpointable_mu_;
  std::set<detail::TaskState*> checkpointable_runs_ ABSL_GUARDED_BY(checkpointable_mu_);

  // Last, so it is destroyed first: its destructor finishes the writes under way, whose
  // callbacks use pool_.
  std::unique_ptr<CheckpointService> store_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_CHECKPOINT_COORDINATOR_H_
