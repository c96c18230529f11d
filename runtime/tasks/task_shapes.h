// File: runtime/tasks/task_shapes.h
//
// The job's task shapes: each distinct set of TaskOptions (ShapeKey) is interned once as a
// TaskShape, resolved against the pool's configuration into the lease request its tasks need, and
// given its queue of runnable tasks. CPU shapes (Gpus(0)) share one queue, served by the
// Executor's CPU workers; each GPU shape has a queue of its own, served by its leases' workers.
//
// Owned by JobRuntime. Shapes and queues are created on demand and never freed before the
// runtime, so the TaskShape* and ShapeQueue* handed out stay valid for its lifetime.
//
// Thread-safety: thread-safe. shapes_mu_ guards the registry (shapes_, queues_, shape_index_);
// each ShapeQueue has its own mutex. Lock order: shapes_mu_ before a queue's mutex (WakeAll,
// TakeAll); shapes_mu_ is never held with the LeaseManager's leases_mu_. A shape's fields are
// constant once ShapeFor returned it, except `refused` (LeaseManager, under its leases_mu_) and
// the counters (atomics).
//
// Callers: JobRuntime::Submit (ShapeFor), Stats (AddStats) and destructor (WakeAll), the
// Executor's CPU workers (cpu_queue) and its Drain at shutdown (TakeAll).
#ifndef GPUPOOL_RUNTIME_TASKS_TASK_SHAPES_H_
#define GPUPOOL_RUNTIME_TASKS_TASK_SHAPES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpupool/runtime.h"
#include "gpupool/task_options.h"
#include "runtime/client/pool_client.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/shape_queue.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {

class TaskShapes {
 public:
  // `default_team` names the team of tasks that give none; with a non-empty `node_label`, every
  // lease is pinned to that node (tasks run in this process). `pool` (its configuration: priority
  // classes) and `local` (this process's GPUs) must outlive this. Interns the default shape.
  // Otherwise a non-empty `preferred_node` (the driver's node) is preferred among equally good
  // placements.
  TaskShapes(std::string default_team, std::string node_label, std::string preferred_node, const PoolClient& pool,
             const pool::Inventory& local);

  // The shape for `options` (nullptr: the default options), created on first use. A shape whose
  // options are invalid comes back with `refused` set (kInvalidArgument): its tasks fail at Submit.
  TaskShape* ShapeFor(const TaskOptions* options);

  ShapeQueue& cpu_queue() { return cpu_queue_; }

  // Shutdown: wakes every worker waiting on a queue (the CPU queue first), then drains every
  // queue, the CPU queue first, returning the tasks that will never run.
  void WakeAll();
  std::vector<Task*> TakeAll();

  // Adds each shape's counters to its team's usage and the queued tasks to `queued_tasks`.
  void AddStats(std::map<std::string, TeamUsage>& teams, uint64_t& queued_tasks) const;

 private:
  // Fills in the shape's lease request and checkpoint interval; an error for invalid options.
  absl::Status ResolveShape(TaskShape& shape) const;

  // Constant after construction.
  const std::string default_team_;
  const std::string node_label_;  // non-empty: leases are pinned to this node
  const std::string preferred_node_;
  const PoolClient& pool_;
  const pool::Inventory& local_;
  TaskShape* default_shape_ = nullptr;  // set by the constructor; read without the lock

  mutable Mutex shapes_mu_;
  std::vector<std::unique_ptr<TaskShape>> shapes_ ABSL_GUARDED_BY(shapes_mu_);
  std::vector<std::unique_ptr<ShapeQueue>> queues_ ABSL_GUARDED_BY(shapes_mu_);  // GPU shapes'
  std::map<std::string, TaskShape*> shape_index_ ABSL_GUARDED_BY(shapes_mu_);  // by ShapeKey
  ShapeQueue cpu_queue_;                             // every CPU shape's; thread-safe itself
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_TASK_SHAPES_H_
