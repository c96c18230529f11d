// File: runtime/tasks/lease_manager.h
//
// The job's leases: asks the pool for leases while a GPU shape has backlog (up to
// max_leases_per_shape), gives each granted lease a worker thread that runs its shape's tasks
// (Deps::run_tasks, the Executor's loop) and, once the worker stops, hands the lease back (or not,
// when it was lost) and withdraws requests nobody needs any more. Revoked and lost leases stop
// their run (LeaseRun::stop, revoked, lost); the running task sees it at its next safe point.
// A request the pool refuses fails the shape for good, and every task queued for it.
//
// Owned by JobRuntime, which also drives its shutdown (StopAll, JoinWorkers, WaitForGrants, in
// that order around the other parts' steps; see ~JobRuntime). It is the pool's LeaseListener for
// every request this job makes.
//
// Thread-safety: thread-safe. The LeaseListener calls come on the pool's callback thread; the
// rest on the Executor's threads (MaybeRequestLeases from Enqueue) and the lease threads.
// leases_mu_ guards pending_requests_, runs_, finished_runs_, each queue's lease bookkeeping
// (ShapeQueue::leases_held, leases_requested, next_request) and TaskShape::refused once a shape is
// out (RefuseShape). Lock order: leases_mu_ before a queue's mutex (StopRun's WakeAll) and before
// the pool client's own locks (Withdraw); never with TaskShapes' shapes_mu_. Not under leases_mu_:
// PoolClient::Submit and Release, events, failing tasks, and joining a lease thread (a finished
// worker may still be taking leases_mu_ to ask for the next lease of its shape).
#ifndef GPUPOOL_RUNTIME_TASKS_LEASE_MANAGER_H_
#define GPUPOOL_RUNTIME_TASKS_LEASE_MANAGER_H_

#include <atomic>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpupool/error.h"
#include "runtime/client/pool_client.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/tasks/local_gpus.h"
#include "runtime/tasks/runtime_events.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {

class LeaseManager final : public LeaseListener {
 public:
  struct Deps {
    PoolClient* pool = nullptr;              // outlives this; reset only after WaitForGrants
    const LocalGpus* gpus = nullptr;         // a granted lease's slots and memory
    const RuntimeEvents* events = nullptr;
    const std::atomic<bool>* stopping = nullptr;  // JobRuntime's: set once, when it shuts down
    std::string job_id;                      // names the requests
    int max_leases_per_shape = 1;
    // Runs the lease's shape's tasks until the lease stops or idles past its linger; called on the
    // lease's own thread, which this starts and joins (Executor::RunLeaseTasks).
    std::function<void(LeaseRun* run)> run_tasks;
    // Fails a task the pool will never find a lease for (Executor::FailTask).
    std::function<void(Task* task, ErrorCode code, const std::string& location, const std::string& message)>
        fail_task;
    // Nodes where the job has a worker now, preferred after a request's own preferred nodes (the
    // driver's): a task placed there needs no new worker. Optional.
    std::function<std::vector<std::string>()> worker_nodes;
  };
  explicit LeaseManager(Deps deps);

  // Asks for more leases for the shape while its backlog exceeds what it holds and has asked for.
  // A refusal comes back through OnRequestFailed, now or later. No-op once stopping or refused.
  void MaybeRequestLeases(TaskShape* shape) ABSL_LOCKS_EXCLUDED(leases_mu_);

  // LeaseListener (called by the pool's thread).
  void OnGranted(const pool::Lease& lease) override;
  void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) override;
  void OnLost(const std::string& lease_id, const std::string& why) override;
  void OnRequestFailed(const std::string& request_id, const absl::Status& why) override;

  // Shutdown, once `stopping` is set. StopAll withdraws the requests not granted yet and tells
  // every run to stop; JoinWorkers joins every lease thread (the running tasks finish and the
  // leases go back); WaitForGrants returns once no OnGranted is under way, so the pool client may go.
  void StopAll() ABSL_LOCKS_EXCLUDED(leases_mu_);
  void JoinWorkers() ABSL_LOCKS_EXCLUDED(leases_mu_);
  void WaitForGrants() const;

 private:
  // The lease thread: runs tasks, then hands the lease back and asks for what its shape still needs.
  void LeaseThread(LeaseRun* run) ABSL_LOCKS_EXCLUDED(leases_mu_);
  // Keeps a granted run if its request is still wanted; reaps the finished runs into `reaped`.
  // Takes `run` only when it keeps it.
  bool Adopt(const std::string& request_id, std::unique_ptr<LeaseRun>& run,
             std::vector<std::unique_ptr<LeaseRun>>& reaped) ABSL_LOCKS_EXCLUDED(leases_mu_);
  void RefuseShape(TaskShape* shape, const absl::Status& why) ABSL_LOCKS_EXCLUDED(leases_mu_);
  // Marks the run of `lease_id` stopped (`flag` says why) and wakes its worker; returns its team,
  // or nothing when the lease is not this job's (any more).
  std::optional<std::string> StopRun(const std::string& lease_id, std::atomic<bool> LeaseRun::*flag)
      ABSL_LOCKS_EXCLUDED(leases_mu_);

  // Constant after construction.
  PoolClient& pool_;
  const LocalGpus& gpus_;
  const RuntimeEvents& events_;
  const std::atomic<bool>& stopping_;
  const std::string job_id_;
  const int max_leases_per_shape_;
  const std::function<void(LeaseRun*)> run_tasks_;
  const std::function<void(Task*, ErrorCode, const std::string&, const std::string&)> fail_task_;
  const std::function<std::vector<std::string>()> worker_nodes_;

  std::atomic<int> granting_{0};  // OnGranted calls under way (WaitForGrants waits for them)

  // Guarded by leases_mu_ (and, outside the analysis, the ShapeQueues' lease bookkeeping and a
  // refused shape's TaskShape::refused: see the top of the file).
  Mutex leases_mu_;
  std::map<std::string, TaskShape*> pending_requests_ ABSL_GUARDED_BY(leases_mu_);  // by request id
  std::map<std::string, std::unique_ptr<LeaseRun>> runs_ ABSL_GUARDED_BY(leases_mu_);  // by lease id
  std::list<std::unique_ptr<LeaseRun>> finished_runs_ ABSL_GUARDED_BY(leases_mu_);  // to be joined
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_LEASE_MANAGER_H_
