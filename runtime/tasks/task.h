// File: runtime/tasks/task.h
//
// One submitted task and the shape of resources it runs on. A Task is created by Submit, waits for
// its dependencies, sits in its shape's queue, runs on a worker, and is deleted once its result is
// resolved. Memory per queued task is the Task itself plus its result entry (a few hundred bytes).
#ifndef GPUPOOL_RUNTIME_TASKS_TASK_H_
#define GPUPOOL_RUNTIME_TASKS_TASK_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpupool/remote.h"
#include "gpupool/task_options.h"
#include "pool/scheduler/lease_request.h"
#include "runtime/objects/object_store.h"

namespace gpupool::runtime {

class ShapeQueue;

// Options interned once per distinct TaskOptions: what every task of that kind shares.
struct TaskShape {
  TaskOptions options;
  std::string team;            // resolved (options.team or the runtime's default)
  bool cpu = true;             // gpus == 0: no lease
  pool::LeaseRequest request;  // the lease a GPU shape asks for (id filled per request)
  absl::Status refused;        // set when the pool refused this shape for good
  ShapeQueue* queue = nullptr;
};

struct Task {
  uint64_t id = 0;
  const detail::FunctionInfo* function = nullptr;
  TaskShape* shape = nullptr;
  std::string args;
  std::vector<detail::ObjectHeader*> deps;    // retained; positional dependencies
  std::vector<detail::ObjectHeader*> nested;  // retained; kept alive only
  ObjectEntry* result = nullptr;              // retained by the task
  int attempt = 0;
  // Dependencies still pending, plus one held by Submit until it has registered them all.
  std::atomic<int> unresolved{1};
  std::atomic<bool> cancelled{false};
  std::atomic<bool> dependency_failed{false};
  std::exception_ptr dependency_failure;  // written once, by whoever set dependency_failed
  Task* next = nullptr;                   // intrusive queue link

  const std::string& name() const {
    return shape->options.name.empty() ? function->name : shape->options.name;
  }
};

// A FIFO of runnable tasks of one shape, and the workers serving it. Workers wait on it when it is
// empty; pushes wake one only when somebody waits, so a busy queue costs no system calls.
class ShapeQueue {
 public:
  void Push(Task* task);
  // Up to `max` tasks, or none once `deadline` passes or `stop` is set while empty.
  // `stop` is read under the queue's mutex; set it with WakeAll.
  size_t PopBatch(Task** out, size_t max, std::chrono::steady_clock::time_point deadline,
                  const std::atomic<bool>& stop);
  // Removes `task` if still queued; true when it was.
  bool Remove(Task* task);
  void WakeAll();
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  // Drains everything queued (shutdown, refusal).
  std::vector<Task*> TakeAll();

  // Lease bookkeeping for GPU shapes, guarded by the runtime's lease mutex.
  int leases_held = 0;
  int leases_requested = 0;
  uint64_t next_request = 0;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Task* head_ = nullptr;  // guarded by mu_
  Task* tail_ = nullptr;  // guarded by mu_
  int idle_ = 0;          // guarded by mu_: workers waiting
  std::atomic<size_t> size_{0};
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_TASK_H_
