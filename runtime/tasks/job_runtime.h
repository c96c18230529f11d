// File: runtime/tasks/job_runtime.h
//
// The job runtime (DESIGN §2): queues tasks by resource shape, asks the pool for leases while a
// shape has backlog, runs many tasks on each lease in this process, and hands idle leases back
// after a short linger so the capacity flows back to the pool.
//
//   - CPU tasks (Gpus(0)) run on `cpu_workers` threads, without leases.
//   - Each GPU lease gets one worker thread that runs that shape's tasks one after another with
//     the lease's slots, memory budget and stream; several leases of one shape (fractions packed
//     onto one GPU, or several GPUs) run in parallel.
//   - A task becomes runnable when its dependencies are resolved; a failed dependency fails it.
//   - A revoked or lost lease stops its worker: the running task sees cancellation, and is
//     requeued (attempt + 1) up to its max_retries, then fails with kUnavailable.
//
// Owns the embedded pool, the object store (until it is orphaned at shutdown: refs may outlive
// the runtime) and the per-GPU memory pools. Thread-safe.
#ifndef GPUPOOL_RUNTIME_TASKS_JOB_RUNTIME_H_
#define GPUPOOL_RUNTIME_TASKS_JOB_RUNTIME_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "gpupool/runtime.h"
#include "runtime/gpu/memory_pool.h"
#include "runtime/tasks/joined_pool.h"
#include "runtime/tasks/checkpoint_service.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/objects/object_exchange.h"
#include "runtime/objects/object_store.h"
#include "runtime/tasks/shape_queue.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {

class JobRuntime final : public LeaseListener {
 public:
  // Starts on the pool the process joined (runtime/bootstrap/pool_join.h: embedded, a head's
  // address, or mpirun's rank 0).
  static absl::StatusOr<std::unique_ptr<JobRuntime>> Start(RuntimeOptions options, JoinedPool joined);
  ~JobRuntime() override;

  // Throws gpupool::Error for what the caller got wrong; a task the pool refuses fails its result.
  // `resume_from`: another process's checkpoint key for the same work (Task::resume_from).
  detail::ObjectHeader* Submit(const detail::FunctionInfo* function, detail::EncodedArgs args,
                               const TaskOptions* options, std::string resume_from = {});
  detail::ObjectHeader* Put(std::unique_ptr<detail::ValueBox> value);
  void Cancel(detail::ObjectHeader* object);

  ObjectStore& store() { return *store_; }
  PoolClient& pool() { return *pool_; }
  // The pool when it lives in this process (tests inject faults through its driver); else null.
  PoolService* embedded_pool() { return embedded_; }
  // The node every lease of this process is pinned to ("" when the pool is embedded).
  const std::string& node() const { return node_label_; }
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  // The job's ranks connected for TaskContext's collectives (a group of one outside mpirun).
  JobGroup& group() { return *group_; }
  ObjectExchange& exchange() { return *exchange_; }
  RuntimeStats Stats() const;
  const std::string& notice() const { return notice_; }
  double clock_speed() const { return options_.clock_speed; }
  GpuMemoryPool* MemoryPoolFor(const pool::GpuRef& gpu);

  // TaskContext's checkpoint calls (runtime/tasks/safe_points.cc).
  int64_t MakeCheckpointable(detail::TaskState& state);
  void SafePoint(detail::TaskState& state);
  // Loads the newest snapshot committed under `key` into the task's registered state; nullopt
  // when there is none.
  std::optional<checkpoint::SnapshotInfo> RestoreState(detail::TaskState& state, const std::string& key);
  void EndCheckpointableRun(detail::TaskState& state);  // the run is over (Execute)
  std::vector<OverdueTask> OverdueTasks() const;

  // LeaseListener (called by the pool's thread).
  void OnGranted(const pool::Lease& lease) override;
  void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) override;
  void OnLost(const std::string& lease_id, const std::string& why) override;
  void OnRequestFailed(const std::string& request_id, const absl::Status& why) override;

 private:
  explicit JobRuntime(RuntimeOptions options) : options_(std::move(options)) {}
  TaskShape* ShapeFor(const TaskOptions* options);
  absl::Status ResolveShape(TaskShape& shape) const;
  void MakeRunnable(Task* task);   // its dependencies are all resolved
  void Enqueue(Task* task);
  void DependencyResolved(Task* task, ObjectEntry* dependency);
  // Resolves the task's result and frees the task; schedules whoever waited for the result.
  void Finish(Task* task, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure);
  void FailTask(Task* task, ErrorCode code, const std::string& location, const std::string& message,
                const std::string& cause = {});
  void Execute(Task* task, LeaseRun* lease);
  // Accounts for a run stopped by its lease going away: preemptions, GPU-seconds of lost work.
  // Returns whether it counts as a system failure (against max_retries): a lost lease, unless
  // the task had already stopped with its snapshot before the grace period ran out.
  bool Preempted(Task* task, LeaseRun* lease, const detail::TaskState& state);
  void CpuWorker();
  void LeaseWorker(LeaseRun* run);
  void MaybeRequestLeases(TaskShape* shape);
  void RefuseShape(TaskShape* shape, const absl::Status& why);
  void Emit(const std::string& kind, const std::string& team, const std::string& lease,
            const std::string& detail);
  // Marks the run of `lease_id` stopped (`flag` says why) and wakes its worker; returns its team,
  // or nothing when the lease is not this job's (any more).
  std::optional<std::string> StopRun(const std::string& lease_id, std::atomic<bool> LeaseRun::*flag);

  RuntimeOptions options_;
  std::string job_id_;
  std::unique_ptr<PoolClient> pool_;
  PoolService* embedded_ = nullptr;      // pool_, when it is embedded
  pool::Inventory local_;                 // the GPUs this process runs tasks on
  std::string node_label_;                // see node()
  int rank_ = 0, ranks_ = 1;              // under mpirun
  std::string notice_;
  std::vector<std::shared_ptr<void>> companions_;  // outlive pool_: see JoinedPool
  std::function<void()> before_stop_;              // see JoinedPool
  std::unique_ptr<JobGroup> group_;
  std::unique_ptr<ObjectExchange> exchange_;  // refs crossing ranks; before group_ goes
  std::unique_ptr<ObjectStore> store_;  // orphaned, not destroyed, at shutdown
  std::unique_ptr<CheckpointService> checkpoints_;
  std::map<std::string, std::unique_ptr<GpuMemoryPool>> memory_pools_;  // "node/index"; fixed
  std::atomic<uint64_t> next_task_id_{1};
  std::atomic<int64_t> waiting_for_dependencies_{0};  // submitted, inputs not all there yet
  // Running checkpointable tasks, for the overdue-safe-point report. Only tasks that called
  // Checkpointable pay for the lock.
  mutable std::mutex checkpointable_mu_;
  std::set<detail::TaskState*> checkpointable_runs_;  // guarded by checkpointable_mu_
  std::atomic<bool> stopping_{false};
  std::atomic<int> granting_{0};  // OnGranted calls under way (the destructor waits for them)
  std::atomic<bool> drained_{false};  // workers are gone: new runnable tasks fail at once

  mutable std::mutex shapes_mu_;
  TaskShape* default_shape_ = nullptr;
  std::vector<std::unique_ptr<TaskShape>> shapes_;             // guarded by shapes_mu_
  std::vector<std::unique_ptr<ShapeQueue>> queues_;            // guarded by shapes_mu_
  std::map<std::string, TaskShape*> shape_index_;              // guarded by shapes_mu_
  ShapeQueue cpu_queue_;
  std::vector<std::thread> cpu_threads_;

  std::mutex leases_mu_;
  std::map<std::string, TaskShape*> pending_requests_;          // guarded by leases_mu_
  std::map<std::string, std::unique_ptr<LeaseRun>> runs_;       // guarded by leases_mu_
  std::list<std::unique_ptr<LeaseRun>> finished_runs_;          // guarded by leases_mu_
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_JOB_RUNTIME_H_
