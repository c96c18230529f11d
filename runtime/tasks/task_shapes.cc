// File: runtime/tasks/task_shapes.cc
#include "runtime/tasks/task_shapes.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/internal/task_options_codec.h"

namespace gpupool::runtime {
namespace {

// The options that decide which lease a task needs, as one key: all of them (every row of
// GPUPOOL_TASK_OPTIONS, so a new option separates shapes without being named here), with the team
// resolved. Tasks with equal keys share leases and a queue.
std::string ShapeKey(TaskOptions o, const std::string& team) {
  o.team = team;
  std::string key;
  Writer w(key);
  Encode(w, o);
  return key;
}

}  // namespace

TaskShapes::TaskShapes(std::string default_team, std::string node_label, std::string preferred_node,
                       const PoolClient& pool, const pool::Inventory& local)
    : default_team_(std::move(default_team)),
      node_label_(std::move(node_label)),
      preferred_node_(std::move(preferred_node)),
      pool_(pool),
      local_(local) {
  default_shape_ = ShapeFor(nullptr);
}

absl::Status TaskShapes::ResolveShape(TaskShape& shape) const {
  const TaskOptions& o = shape.options;
  if (!(o.gpus >= 0) || std::isinf(o.gpus)) {
    return absl::InvalidArgumentError(absl::StrCat("Gpus(", o.gpus, ") must be 0 (a CPU task), a fraction below 1, or a whole number"));
  }
  if (o.max_retries < 0) return absl::InvalidArgumentError("MaxRetries cannot be negative");
  if (o.gpu_memory_mib < 0) return absl::InvalidArgumentError("GpuMemoryMib cannot be negative");
  if (!(o.cpus >= 0) || std::isinf(o.cpus)) {
    return absl::InvalidArgumentError(absl::StrCat("Cpus(", o.cpus, ") must be a number of cores, 0 or more"));
  }
  if (o.host_memory_mib < 0) return absl::InvalidArgumentError("HostMemoryMib cannot be negative");
  {
    const std::string& name = o.priority_class.empty() ? std::string("training") : o.priority_class;
    const pool::PriorityClass* c = pool_.config().scheduling.FindClass(name);
    shape.checkpoint_interval_s = c != nullptr ? static_cast<double>(c->checkpoint_interval_s) : 0;
  }
  shape.cpu = o.gpus == 0;
  if (shape.cpu) {
    if (o.gpu_memory_mib > 0 || !o.models.empty() || o.hardware_isolation) {
      return absl::InvalidArgumentError(
          "GPU options (memory, models, isolation) were given to a CPU task: set Gpus(...) too");
    }
    if (o.cpus > 0 || o.host_memory_mib > 0) {
      return absl::InvalidArgumentError(
          "Cpus and HostMemoryMib are what a GPU task's lease holds on its node; a CPU task (Gpus(0)) runs on this "
          "process's threads and holds nothing in the pool: set Gpus(...) too, or drop them");
    }
    return absl::OkStatus();
  }
  pool::LeaseRequest& r = shape.request;
  r.team = shape.team;
  r.project = o.project;
  r.workload_class = o.workload_class;
  r.priority_class = o.priority_class;
  r.allowed_models = o.models;
  r.required_labels = o.labels;
  if (!node_label_.empty()) {
    // Tasks run in this process, so its leases must be on its node.
    auto asked = o.labels.find("node");
    if (asked != o.labels.end() && asked->second != node_label_) {
      return absl::InvalidArgumentError(absl::StrCat("Label(\"node\", \"", asked->second, "\"): this process runs on node '",
                                                     node_label_, "' and its tasks run here"));
    }
    r.required_labels["node"] = node_label_;
  } else if (!preferred_node_.empty()) {
    r.preferred_nodes = {preferred_node_};  // this process runs them without a worker
  }
  r.forbidden_labels = o.avoid_labels;
  r.hardware_isolation = o.hardware_isolation;
  if (o.gpus < 1) {
    // A fraction's memory: as asked, else its compute share of the smallest GPU it may land on.
    int64_t memory = o.gpu_memory_mib;
    if (memory == 0) {
      uint64_t smallest = 0;
      for (const pool::InventoryGpu& g : local_.gpus()) {
        if (!o.models.empty() && std::find(o.models.begin(), o.models.end(), g.device.model) == o.models.end()) continue;
        if (smallest == 0 || g.device.memory_mib < smallest) smallest = g.device.memory_mib;
      }
      memory = std::max<int64_t>(pool::kMinFractionMemoryMib, static_cast<int64_t>(o.gpus * smallest));
    }
    r.slot = pool::SlotShape::Fraction(memory, std::max(1, static_cast<int>(std::lround(o.gpus * 1000))));
    r.slot_count = 1;
  } else {
    if (o.gpus != std::floor(o.gpus)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gpus(", o.gpus, "): more than one GPU must be a whole number (fractions are below 1)"));
    }
    r.slot = pool::SlotShape::WholeGpu();
    r.slot_count = static_cast<int>(o.gpus);
    r.min_gpu_memory_mib = o.gpu_memory_mib;
    // A task runs in one process, so its GPUs are on one node.
    r.topology = r.slot_count > 1 ? pool::GangTopology::kSameNode : pool::GangTopology::kAny;
  }
  // Host resources go with each slot on its node: a gang's total, split evenly (rounded up).
  const int64_t slots = std::max(1, r.slot_count);
  r.slot.cpu_milli = (static_cast<int64_t>(std::ceil(o.cpus * 1000)) + slots - 1) / slots;
  r.slot.host_memory_mib = (o.host_memory_mib + slots - 1) / slots;
  return absl::OkStatus();
}

TaskShape* TaskShapes::ShapeFor(const TaskOptions* options) {
  if (options == nullptr && default_shape_ != nullptr) return default_shape_;
  TaskOptions o = options != nullptr ? *options : TaskOptions();
  std::string team = o.team.empty() ? default_team_ : o.team;
  std::string key = ShapeKey(o, team);
  MutexLock lock(&shapes_mu_);
  auto it = shape_index_.find(key);
  if (it != shape_index_.end()) return it->second;
  auto shape = std::make_unique<TaskShape>();
  shape->options = std::move(o);
  shape->team = team;
  shape->refused = ResolveShape(*shape);
  if (shape->cpu) {
    shape->queue = &cpu_queue_;
  } else {
    queues_.push_back(std::make_unique<ShapeQueue>());
    shape->queue = queues_.back().get();
  }
  TaskShape* raw = shape.get();
  shapes_.push_back(std::move(shape));
  shape_index_[key] = raw;
  return raw;
}

void TaskShapes::WakeAll() {
  cpu_queue_.WakeAll();
  MutexLock lock(&shapes_mu_);
  for (auto& q : queues_) q->WakeAll();
}

std::vector<Task*> TaskShapes::TakeAll() {
  std::vector<Task*> left = cpu_queue_.TakeAll();
  MutexLock lock(&shapes_mu_);
  for (auto& q : queues_) {
    std::vector<Task*> more = q->TakeAll();
    left.insert(left.end(), more.begin(), more.end());
  }
  return left;
}

void TaskShapes::AddStats(std::map<std::string, TeamUsage>& teams, uint64_t& queued_tasks) const {
  {
    MutexLock lock(&shapes_mu_);
    for (const auto& shape : shapes_) {
      const ShapeCounters& c = shape->counters;
      TeamUsage& u = teams[shape->team];
      u.tasks_run += c.tasks_run.load();
      u.tasks_failed += c.tasks_failed.load();
      u.busy_gpu_hours += static_cast<double>(c.busy_gpu_micros.load()) / 1e6 / 3600;
      u.lost_gpu_hours += static_cast<double>(c.lost_gpu_micros.load()) / 1e6 / 3600;
      u.preemptions += c.preemptions.load();
      u.snapshots += c.snapshots.load();
    }
    for (const auto& q : queues_) queued_tasks += q->size();
  }
  queued_tasks += cpu_queue_.size();
}

}  // namespace gpupool::runtime
