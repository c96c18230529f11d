// File: runtime/job/lease_run.h
//
// A granted lease as the job runtime uses it (LeaseRun), and what a running task's TaskContext
// reads (detail::TaskState). Internal to runtime/.
#ifndef GPUPOOL_RUNTIME_JOB_LEASE_RUN_H_
#define GPUPOOL_RUNTIME_JOB_LEASE_RUN_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gpupool/task_context.h"
#include "pool/scheduler/scheduler.h"
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
  std::atomic<bool> stop{false};          // revoked, lost or shutting down: take no more tasks
  std::atomic<bool> revoked{false};
  std::atomic<bool> lost{false};
  std::atomic<bool> finished{false};      // the worker thread has exited (join it)
  std::thread thread;
};

}  // namespace gpupool::runtime

namespace gpupool::detail {

struct TaskState {
  runtime::JobRuntime* runtime = nullptr;
  runtime::Task* task = nullptr;
  runtime::LeaseRun* lease = nullptr;  // nullptr for a CPU task
};

}  // namespace gpupool::detail

#endif  // GPUPOOL_RUNTIME_JOB_LEASE_RUN_H_
