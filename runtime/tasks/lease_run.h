// File: runtime/tasks/lease_run.h
//
// A granted lease as the job runtime uses it (LeaseRun), and what a running task's TaskContext
// reads (detail::TaskState). Internal to runtime/.
#ifndef GPUPOOL_RUNTIME_TASKS_LEASE_RUN_H_
#define GPUPOOL_RUNTIME_TASKS_LEASE_RUN_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpupool/task_context.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/gpu/device_copy.h"
#include "runtime/gpu/memory_pool.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {

class JobRuntime;

struct LeaseRun {
  pool::Lease lease;
  TaskShape* shape = nullptr;
  std::vector<SlotInfo> slots;
  std::string location;                   // "node-0/GPU 3"
  GpuMemoryPool* memory = nullptr;        // the first slot's GPU
  std::shared_ptr<MemoryBudget> budget;   // shared with the blocks allocated under it
  void* stream = nullptr;                 // this lease's stream on the first slot's GPU
  double gpus = 0;                        // compute share in GPUs, for busy-time accounting
  // Pool microseconds x GPUs its tasks ran (every run's RunOutcome::busy_gpu_micros), told to the
  // pool with the release (PoolClient::ReleaseUsed): the ledger's busy time.
  std::atomic<int64_t> busy_gpu_micros{0};
  bool remote = false;                    // on another node: its tasks run in the job's worker there
  std::atomic<bool> stop{false};          // revoked, lost or shutting down: take no more tasks
  std::atomic<bool> revoked{false};
  std::atomic<double> revoke_deadline_s{0};  // pool time by which a revoked lease must be released
  std::atomic<bool> lost{false};
  std::atomic<bool> finished{false};      // lease given back; the thread may still be winding down (join it, never under leases_mu_)
  std::thread thread;
};

}  // namespace gpupool::runtime

namespace gpupool::detail {

struct TaskState {
  runtime::JobRuntime* runtime = nullptr;
  runtime::Task* task = nullptr;
  runtime::LeaseRun* lease = nullptr;  // nullptr for a CPU task
  double started_pool_s = 0;           // when this run began

  // Checkpointing, for this run (registered anew by each run; see TaskContext::Checkpointable).
  bool checkpointable = false;
  bool resumed = false;
  int64_t step = 0;
  std::vector<StateRegion> regions;
  std::function<std::string()> save;
  std::function<void(std::string_view)> load;
  std::string saved;                            // save()'s bytes, kept while they are staged
  std::vector<runtime::PinnedHostBuffer> mirrors;  // pinned host copies of device regions
  double last_snapshot_pool_s = -1;             // this run's last snapshot taken (staged)
  std::atomic<double> last_safe_point_pool_s{0};  // read by Stats() for overdue tasks
  bool snapshot_at_stop = false;                // a preemption snapshot was committed
};

}  // namespace gpupool::detail

#endif  // GPUPOOL_RUNTIME_TASKS_LEASE_RUN_H_
