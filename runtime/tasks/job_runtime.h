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
// JobRuntime is the facade the API layer (runtime/api) uses; the work is done by its parts, one
// idea each, which it builds in Start, wires together and shuts down in order:
//
//   TaskShapes             task_shapes.h             shapes and their queues of runnable tasks
//   LeaseManager           lease_manager.h           lease requests, grants, revocations, lease threads
//   Executor               executor.h                dependencies, CPU workers, running and finishing tasks
//   CheckpointCoordinator  checkpoint_coordinator.h  safe points, snapshots, the checkpoint store
//   LocalGpus              local_gpus.h              this process's GPUs and their memory pools
//   RuntimeEvents          runtime_events.h          RuntimeOptions::on_event
//
// A driver joined to a shared pool also runs tasks in workers on other nodes (StartWorkers):
//
//   WorkerPool             worker_pool.h             the workers' connections, their handshake
//   RemoteLeases           remote_leases.h           tasks sent to workers, their outcomes
//   RemoteObjects          remote_objects.h          values workers keep, lineage, loans
//
// and answers its workers: their Fetches of the driver's objects, and the GPU tasks their tasks
// submit (SubmitFor, submitted as this driver's own).
//
// The parts reach each other through references JobRuntime passes them (it owns them all, with
// std::unique_ptr). Lock order across them: TaskShapes' shapes_mu_ and LeaseManager's leases_mu_
// are never held together; either may be held while taking a ShapeQueue's mutex, and leases_mu_
// while calling PoolClient::Withdraw; CheckpointCoordinator's checkpointable_mu_ is a leaf.
//
// Owns the pool client, the object store (until it is orphaned at shutdown: refs may outlive the
// runtime) and the per-GPU memory pools. Thread-safe.
#ifndef GPUPOOL_RUNTIME_TASKS_JOB_RUNTIME_H_
#define GPUPOOL_RUNTIME_TASKS_JOB_RUNTIME_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpupool/runtime.h"
#include "runtime/gpu/memory_pool.h"
#include "runtime/objects/object_exchange.h"
#include "runtime/objects/object_store.h"
#include "runtime/tasks/checkpoint_coordinator.h"
#include "runtime/tasks/executor.h"
#include "runtime/tasks/joined_pool.h"
#include "runtime/tasks/lease_manager.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/tasks/rank_device_comm.h"
#include "runtime/tasks/local_gpus.h"
#include "runtime/tasks/remote_leases.h"
#include "runtime/tasks/remote_objects.h"
#include "runtime/tasks/worker_pool.h"
#include "runtime/tasks/runtime_events.h"
#include "runtime/tasks/task.h"
#include "runtime/tasks/task_shapes.h"

namespace gpupool::runtime {

class JobRuntime final {
 public:
  // Starts on the pool the process joined (runtime/bootstrap/pool_join.h: embedded, a head's
  // address, or mpirun's rank 0).
  static absl::StatusOr<std::unique_ptr<JobRuntime>> Start(RuntimeOptions options, JoinedPool joined);
  // Stops the workers (running tasks finish or stop at a safe point), fails what is still queued,
  // gives the leases back, then lets go of the pool.
  ~JobRuntime();

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
  // This process's node in the pool ("" when the pool is embedded, or the driver is on none).
  const std::string& node() const { return node_label_; }
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  // The job's ranks connected for TaskContext's collectives (a group of one outside mpirun).
  JobGroup& group() { return *group_; }
  // The ranks' NCCL communicator for device-buffer collectives (over group()).
  RankDeviceComm& device_comm() { return *device_comm_; }
  // A lease's tasks are done: the NCCL communicators on its GPUs go (their memory lies outside
  // the budgets). On the lease's thread: in this process before the GPUs go back to the pool; in a
  // worker (tasks on another node) when it hears the lease ended, which is after the driver
  // released it (a gap of one message; not yet closed).
  void EndDeviceUse(LeaseRun& run);
  ObjectExchange& exchange() { return *exchange_; }
  // The objects its workers keep for this driver; null unless the job may start workers.
  RemoteObjects* remote_objects() { return remote_objects_.get(); }
  RuntimeStats Stats() const;
  const std::string& notice() const { return notice_; }
  double clock_speed() const { return options_.clock_speed; }
  GpuMemoryPool* MemoryPoolFor(const pool::GpuRef& gpu) { return gpus_->MemoryPoolFor(gpu); }

  // The parts a worker process drives directly (runtime/tasks/worker_host.h).
  Executor& executor() { return *executor_; }
  TaskShapes& shapes() { return *shapes_; }
  const LocalGpus& gpus() const { return *gpus_; }
  CheckpointCoordinator& checkpoints() { return *checkpoints_; }
  // Workers of this job connected now (0 unless it runs tasks on other nodes).
  size_t workers_connected() const { return workers_ != nullptr ? workers_->connected() : 0; }

  // TaskContext's checkpoint calls (CheckpointCoordinator), on the task's thread.
  int64_t MakeCheckpointable(detail::TaskState& state) { return checkpoints_->MakeCheckpointable(state); }
  void SafePoint(detail::TaskState& state) { checkpoints_->SafePoint(state); }

 private:
  explicit JobRuntime(RuntimeOptions options) : options_(std::move(options)), events_(options_.on_event, pool_) {}
  // Start's second half: the object exchange, the checkpoints, the memory pools and the engine.
  absl::Status StartParts(JoinedPool& joined);
  // The engine's parts (shapes, leases, executor), wired together; starts the CPU workers.
  void StartEngine();
  // The worker pool, when the job may run tasks on nodes where it has no process.
  absl::Status StartWorkers(WorkerPlan plan, const std::string& driver);
  // A GPU task a task in the worker `from` submitted (wire::Submit), submitted here as this
  // driver's own: its result, retained; or why not (an unknown function, unreadable options, a
  // ref to an object this driver does not hold). The reader thread of `from`'s connection.
  absl::StatusOr<ObjectEntry*> SubmitFor(WorkerConnection& from, wire::Submit&& submit);

  // Constant after Start.
  RuntimeOptions options_;
  std::string job_id_;
  std::unique_ptr<PoolClient> pool_;
  PoolService* embedded_ = nullptr;      // pool_, when it is embedded
  std::string node_label_;                // see node()
  bool pinned_ = true;                    // leases only on node_label_
  int rank_ = 0, ranks_ = 1;              // under mpirun
  std::string notice_;
  HostedParts hosted_;                             // outlive pool_: see HostedParts
  std::function<void()> before_stop_;              // see JoinedPool
  RuntimeEvents events_;                           // reads options_.on_event and pool_
  std::unique_ptr<JobGroup> group_;
  std::unique_ptr<RankDeviceComm> device_comm_;  // over group_; goes before it
  std::unique_ptr<ObjectExchange> exchange_;  // refs crossing ranks; before group_ goes
  std::unique_ptr<ObjectStore> store_;        // orphaned, not destroyed, at shutdown
  std::unique_ptr<LocalGpus> gpus_;           // the GPUs this process runs tasks on

  std::unique_ptr<CheckpointCoordinator> checkpoints_;  // reset before pool_ (see the destructor)
  std::atomic<uint64_t> next_task_id_{1};
  std::atomic<bool> stopping_{false};  // set once, first thing in the destructor; the parts read it

  // The engine: declared after gpus_ so the lease runs (holding memory budgets) go before the
  // memory pools; null when Start failed before it got to them.
  std::unique_ptr<TaskShapes> shapes_;
  std::unique_ptr<LeaseManager> leases_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<RemoteLeases> remote_;  // leases on other nodes: their tasks go to workers
  std::unique_ptr<WorkerPool> workers_;   // null unless the job may start workers
  // Shared with the store, which may outlive this runtime (it asks and forgets through it).
  std::shared_ptr<RemoteObjects> remote_objects_;
  std::atomic<uint64_t> bytes_fetched_by_workers_{0};
  // UCX for fetching the results workers keep (null when it could not start); cleared from
  // remote_objects_ and destroyed once the workers are gone.
  std::unique_ptr<transport::UcxWorker> objects_ucx_;
  std::unique_ptr<transport::ObjectFetcher> objects_fetcher_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_JOB_RUNTIME_H_
