// File: runtime/tasks/shape_queue.h
//
// A FIFO of runnable tasks of one shape, and the workers serving it. Workers wait on it when it is
// empty; pushes wake one only when somebody waits, so a busy queue costs no system calls.
#ifndef GPUPOOL_RUNTIME_TASKS_SHAPE_QUEUE_H_
#define GPUPOOL_RUNTIME_TASKS_SHAPE_QUEUE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/sync/mutex.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {

class ShapeQueue {
 public:
  void Push(Task* task);
  // Up to `max` tasks, or none once `deadline` passes or `stop` is set while empty.
  // `stop` is read under the queue's mutex; set it with WakeAll.
  size_t PopBatch(Task** out, size_t max, std::chrono::steady_clock::time_point deadline,
                  const std::atomic<bool>& stop);
  void WakeAll() ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  // Lease threads waiting in PopBatch now (a task pushed now is theirs: no new lease needed).
  // Read without the queue's lock: every GPU task's submit asks.
  int idle() const { return idle_.load(std::memory_order_relaxed); }
  // Drains everything queued (shutdown, refusal).
  std::vector<Task*> TakeAll();

  // Lease bookkeeping for GPU shapes, guarded by LeaseManager::leases_mu_ (lease_manager.h). Not
  // ABSL_GUARDED_BY: the attribute cannot name another object's lock. LeaseManager touches them
  // only in its functions marked ABSL_EXCLUSIVE_LOCKS_REQUIRED(leases_mu_) or under a MutexLock
  // of it.
  int leases_held = 0;
  int leases_requested = 0;
  uint64_t next_request = 0;

 private:
  mutable Mutex mu_;
  CondVar cv_;
  Task* head_ ABSL_GUARDED_BY(mu_) = nullptr;
  Task* tail_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<int> idle_{0};  // workers waiting; changed under mu_
  std::atomic<size_t> size_{0};
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_SHAPE_QUEUE_H_
