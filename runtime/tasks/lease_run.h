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
#include "runtime/gpu/nccl_communicator.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {

class JobRuntime;

// One slot's GPU memory as a lease uses it.
struct SlotMemory {
  GpuMemoryPool* pool = nullptr;         // null where the GPU is not this process's
  std::shared_ptr<MemoryBudget> budget;  // shared with the blocks allocated under it
  void* stream = nullptr;                // this lease's stream on the slot's GPU

  // The stream the lease's work on this GPU is ordered on: its own, or the pool's when it got none.
  void* work_stream() const { return stream != nullptr ? stream : pool->stream(); }
};

struct LeaseRun {
  pool::Lease lease;
  TaskShape* shape = nullptr;
  std::vector<SlotInfo> slots;
  std::string location;                   // "node-0/GPU 3"
  std::vector<SlotMemory> memory;         // by slot; empty for a CPU task
  // NCCL over the slots' GPUs, for TaskContext::AllReduceAcrossSlots: made on first use, aborted
  // when an operation is given up (revocation), then made anew. Used by the lease's task thread.
  std::unique_ptr<NcclCommunicator> slots_comm;
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

  // The first slot's memory (Allocate(bytes), stream(), the budget figures); null for a CPU task
  // or a GPU that is not this process's.
  const SlotMemory* first_memory() const {
    return !memory.empty() && memory.front().pool != nullptr ? &memory.front() : nullptr;
  }
  // The lease's stream on CUDA device `cuda_device` (the first slot there), the pool's own when the
  // lease has none of its own; nullptr when no slot is on that device.
  void* StreamOn(int cuda_device) const {
    for (const SlotMemory& m : memory) {
      if (m.pool != nullptr && m.pool->cuda_device() == cuda_device) return m.work_stream();
    }
    return nullptr;
  }
  // Gives every slot's stream back to its pool (once the lease's tasks are done).
  void ReleaseStreams() {
    for (SlotMemory& m : memory) {
      if (m.pool != nullptr && m.stream != nullptr) m.pool->ReleaseStream(m.stream);
      m.stream = nullptr;
    }
  }
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
