#include "runtime/tasks/job_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/devices/device_driver.h"
#include "runtime/tasks/function_registry.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/objects/host_memory.h"

namespace gpupool::runtime {

namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string GpuKey(const pool::GpuRef& ref) { return absl::StrCat(ref.node, "/", ref.index); }

// The options that decide which lease a task needs, as one key. Tasks with equal keys share
// leases and a queue.
std::string ShapeKey(const TaskOptions& o, const std::string& team) {
  std::string key = absl::StrCat(o.gpus, "|", o.gpu_memory_mib, "|", absl::StrJoin(o.models, ","),
                                 "|", o.hardware_isolation, "|", team, "|", o.project, "|",
                                 o.workload_class, "|", o.priority_class, "|", o.max_retries, "|",
                                 o.name, "|");
  for (const auto& [k, v] : o.labels) absl::StrAppend(&key, k, "=", v, ",");
  absl::StrAppend(&key, "|");
  for (const auto& [k, v] : o.avoid_labels) absl::StrAppend(&key, k, "=", v, ",");
  return key;
}

std::exception_ptr MakeTaskError(ErrorCode code, const std::string& task_name, uint64_t task_id,
                                 int attempt, const std::string& location,
                                 const std::string& message, const std::string& cause = {}) {
  std::string what = absl::StrCat("task '", task_name, "' (task ", task_id, ", attempt ",
                                  attempt + 1, ") on ", location, ": ", message);
  return std::make_exception_ptr(TaskError(code, what, task_name, location, message, cause));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobRuntime>> JobRuntime::Start(RuntimeOptions options, JoinedPool joined) {
  if (options.team.empty()) return absl::InvalidArgumentError("the runtime's default team is empty");
  if (options.lease_linger_ms < 0) return absl::InvalidArgumentError("lease linger cannot be negative");
  if (options.max_leases_per_shape < 1) {
    return absl::InvalidArgumentError("max leases per shape must be at least 1");
  }
  if (options.host_memory_reuse_mib > 0) ReuseLargeHostAllocations(options.host_memory_reuse_mib << 20);
  std::unique_ptr<JobRuntime> rt(new JobRuntime(std::move(options)));
  // The store first: the destructor (run when a step below fails) hands it over to live refs.
  rt->store_ = std::make_unique<ObjectStore>();
  const RuntimeOptions& o = rt->options_;
  absl::StatusOr<pool::Inventory> local = pool::Inventory::FromDiscovery(joined.local_nodes);
  if (!local.ok()) return local.status();
  rt->local_ = *std::move(local);
  rt->pool_ = std::move(joined.pool);
  rt->embedded_ = joined.embedded;
  rt->node_label_ = std::move(joined.node_label);
  rt->rank_ = joined.rank;
  rt->ranks_ = joined.ranks;
  rt->notice_ = std::move(joined.notice);
  rt->companions_ = std::move(joined.companions);
  rt->before_stop_ = std::move(joined.before_stop);
  rt->group_ = joined.group != nullptr ? std::move(joined.group) : JobGroup::Solo();
  // Host and pid: unique among the processes that may share a checkpoint directory.
  rt->job_id_ = absl::StrCat("job-", pool::HostName(), "-", getpid());
  // Ids name their rank, so refs can cross ranks (runtime/objects/object_exchange.h).
  rt->store_->SetIdBase(static_cast<ObjectId>(rt->group_->rank()) << ObjectStore::kRankShift);
  absl::StatusOr<std::unique_ptr<ObjectExchange>> exchange = ObjectExchange::Start(
      *rt->group_, *rt->store_,
      [raw = rt.get()](ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure) {
        std::vector<Task*> waiting = failure ? raw->store_->Fail(entry, std::move(failure))
                                             : raw->store_->Complete(entry, std::move(value));
        for (Task* t : waiting) raw->DependencyResolved(t, entry);
      },
      [raw = rt.get()](const Lineage& lineage, ObjectId lost) -> detail::ObjectHeader* {
        const detail::FunctionInfo* function = detail::FunctionNamed(lineage.function);
        if (function == nullptr) {
          throw Error(ErrorCode::kNotFound, absl::StrCat("this program has no remote function '", lineage.function, "'"));
        }
        raw->Emit("object-rebuilt", lineage.options.team, "",
                  absl::StrCat("object ", lost, " of rank ", ObjectExchange::OwnerOf(lost), ": running '",
                               lineage.function, "' again here"));
        return raw->Submit(function, detail::EncodedArgs{lineage.args, {}, {}}, &lineage.options,
                           lineage.checkpoint_key);
      },
      ObjectExchange::Options{.patience = absl::Seconds(o.collective_timeout_s),
                              .lineage_of = [job_id = rt->job_id_](const Task& producer) -> std::optional<Lineage> {
                                // A task with inputs or nested refs cannot be rerun from its
                                // arguments alone.
                                if (!producer.deps.empty() || !producer.nested.empty()) return std::nullopt;
                                return Lineage{producer.function->name, producer.args, producer.shape->options,
                                               CheckpointKey(job_id, producer.id)};
                              },
                              .access_key = std::move(joined.object_access_key)});
  if (!exchange.ok()) return exchange.status();
  rt->exchange_ = *std::move(exchange);
  rt->checkpoints_ = std::make_unique<CheckpointService>(CheckpointServiceOptions{
      .dir = o.checkpoint_dir, .shared = o.checkpoint_dir_shared, .keep_last = o.checkpoint_keep_last,
      .staging_bytes = o.checkpoint_staging_mib << 20});
  bool real = joined.driver == "nvidia";
  for (const pool::InventoryGpu& gpu : rt->local_.gpus()) {
    std::unique_ptr<MemoryBackend> backend;
    if (real) {
      int device = CudaDeviceForPciBusId(gpu.device.pci_bus_id);
      absl::StatusOr<std::unique_ptr<MemoryBackend>> cuda =
          device >= 0 ? MakeCudaMemoryBackend(device)
                      : absl::StatusOr<std::unique_ptr<MemoryBackend>>(absl::UnavailableError(
                            absl::StrCat("CUDA does not see ", gpu.device.pci_bus_id)));
      if (!cuda.ok()) return cuda.status();
      backend = *std::move(cuda);
    } else {
      backend = MakeHostMemoryBackend();
    }
    rt->memory_pools_[GpuKey(gpu.ref)] = std::make_unique<GpuMemoryPool>(
        absl::StrCat(gpu.ref.node, "/GPU ", gpu.ref.index), gpu.device.memory_mib * kMiB,
        std::move(backend));
  }
  int workers = o.cpu_workers > 0 ? o.cpu_workers
                                  : std::max(1u, std::thread::hardware_concurrency());
  rt->default_shape_ = rt->ShapeFor(nullptr);
  for (int i = 0; i < workers; ++i) rt->cpu_threads_.emplace_back([raw = rt.get()] { raw->CpuWorker(); });
  return rt;
}

JobRuntime::~JobRuntime() {
  stopping_.store(true);
  // Requests not granted yet are withdrawn; then the pool stops, so no callback runs after this.
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    for (const auto& [id, shape] : pending_requests_) (void)pool_->Withdraw(id);
    pending_requests_.clear();
    for (auto& [id, run] : runs_) run->stop.store(true);
  }
  cpu_queue_.WakeAll();
  {
    std::lock_guard<std::mutex> lock(shapes_mu_);
    for (auto& q : queues_) q->WakeAll();
  }
  for (std::thread& t : cpu_threads_) t.join();
  // Lease workers finish their running task, give their lease back and exit.
  std::vector<LeaseRun*> runs;
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    for (auto& [id, run] : runs_) runs.push_back(run.get());
    for (auto& run : finished_runs_) runs.push_back(run.get());
  }
  for (LeaseRun* run : runs) {
    if (run->thread.joinable()) run->thread.join();
  }
  drained_.store(true, std::memory_order_release);
  // Whatever is still queued will never run.
  std::vector<Task*> left = cpu_queue_.TakeAll();
  for (auto& q : queues_) {
    std::vector<Task*> more = q->TakeAll();
    left.insert(left.end(), more.begin(), more.end());
  }
  for (Task* t : left) FailTask(t, ErrorCode::kCancelled, "queue", "the runtime shut down");
  if (before_stop_) before_stop_();
  exchange_.reset();  // before the group whose worker it runs on
  while (granting_.load() != 0) std::this_thread::yield();  // see OnGranted
  checkpoints_.reset();  // its writer's commit callbacks tell pool_ (SafePoint): drained first
  pool_.reset();
  while (!companions_.empty()) companions_.pop_back();  // newest first: the agent, then the head
  // Runs may still own memory budgets shared with live DeviceBuffers; the pools must outlive those
  // buffers, which a well-behaved program has dropped by now.
  ObjectStore::Orphan(std::move(store_));
}

GpuMemoryPool* JobRuntime::MemoryPoolFor(const pool::GpuRef& gpu) {
  auto it = memory_pools_.find(GpuKey(gpu));
  return it == memory_pools_.end() ? nullptr : it->second.get();
}

absl::Status JobRuntime::ResolveShape(TaskShape& shape) const {
  const TaskOptions& o = shape.options;
  if (!(o.gpus >= 0) || std::isinf(o.gpus)) {
    return absl::InvalidArgumentError(absl::StrCat("Gpus(", o.gpus, ") must be 0 (a CPU task), a fraction below 1, or a whole number"));
  }
  if (o.max_retries < 0) return absl::InvalidArgumentError("MaxRetries cannot be negative");
  if (o.gpu_memory_mib < 0) return absl::InvalidArgumentError("GpuMemoryMib cannot be negative");
  {
    const std::string& name = o.priority_class.empty() ? std::string("training") : o.priority_class;
    const pool::PriorityClass* c = pool_->config().scheduling.FindClass(name);
    shape.checkpoint_interval_s = c != nullptr ? static_cast<double>(c->checkpoint_interval_s) : 0;
  }
  shape.cpu = o.gpus == 0;
  if (shape.cpu) {
    if (o.gpu_memory_mib > 0 || !o.models.empty() || o.hardware_isolation) {
      return absl::InvalidArgumentError(
          "GPU options (memory, models, isolation) were given to a CPU task: set Gpus(...) too");
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
  return absl::OkStatus();
}

TaskShape* JobRuntime::ShapeFor(const TaskOptions* options) {
  if (options == nullptr && default_shape_ != nullptr) return default_shape_;
  TaskOptions o = options != nullptr ? *options : TaskOptions();
  std::string team = o.team.empty() ? options_.team : o.team;
  std::string key = ShapeKey(o, team);
  std::lock_guard<std::mutex> lock(shapes_mu_);
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

detail::ObjectHeader* JobRuntime::Submit(const detail::FunctionInfo* function,
                                         detail::EncodedArgs args, const TaskOptions* options,
                                         std::string resume_from) {
  auto task = std::make_unique<Task>();
  task->id = next_task_id_.fetch_add(1, std::memory_order_relaxed);
  task->resume_from = std::move(resume_from);
  task->function = function;
  task->args = std::move(args.bytes);
  task->deps = std::move(args.deps);
  task->nested = std::move(args.nested);
  task->shape = ShapeFor(options);
  ObjectEntry* result = store_->CreatePending();
  detail::Retain(result);  // one for the caller, one for the task
  result->producer = task.get();
  task->result = result;
  Task* t = task.release();
  if (stopping_.load(std::memory_order_relaxed)) {
    FailTask(t, ErrorCode::kCancelled, "submit", "the runtime is shutting down");
    return result;
  }
  if (!t->shape->refused.ok()) {
    const absl::Status& why = t->shape->refused;
    FailTask(t, static_cast<ErrorCode>(why.code()), "submit", std::string(why.message()));
    return result;
  }
  t->unresolved.store(static_cast<int>(t->deps.size()) + 1, std::memory_order_relaxed);
  if (!t->deps.empty()) waiting_for_dependencies_.fetch_add(1, std::memory_order_relaxed);
  for (detail::ObjectHeader* h : t->deps) {
    auto* dep = static_cast<ObjectEntry*>(h);
    if (!store_->AddDependent(dep, t)) DependencyResolved(t, dep);
  }
  if (t->unresolved.fetch_sub(1, std::memory_order_acq_rel) == 1) MakeRunnable(t);
  return result;
}

void JobRuntime::DependencyResolved(Task* task, ObjectEntry* dependency) {
  if (dependency->state.load(std::memory_order_acquire) == detail::kObjectFailed) {
    bool expected = false;
    if (task->dependency_failed.compare_exchange_strong(expected, true)) {
      task->dependency_failure = dependency->failure;
    }
  }
  if (task->unresolved.fetch_sub(1, std::memory_order_acq_rel) == 1) MakeRunnable(task);
}

void JobRuntime::MakeRunnable(Task* task) {
  if (!task->deps.empty()) waiting_for_dependencies_.fetch_sub(1, std::memory_order_relaxed);
  if (task->dependency_failed.load(std::memory_order_acquire)) {
    std::string why = "a dependency failed";
    std::string cause;  // the original exception travels on, as Ray's dependants re-raise it
    try {
      std::rethrow_exception(task->dependency_failure);
    } catch (const TaskError& e) {
      why = absl::StrCat("a dependency failed: ", e.what());
      cause = e.cause();
    } catch (const std::exception& e) {
      why = absl::StrCat("a dependency failed: ", e.what());
    } catch (...) {
    }
    FailTask(task, ErrorCode::kAborted, "submit", why, cause);
    return;
  }
  Enqueue(task);
}

void JobRuntime::Enqueue(Task* task) {
  if (drained_.load(std::memory_order_acquire)) {
    FailTask(task, ErrorCode::kCancelled, "queue", "the runtime shut down");
    return;
  }
  TaskShape* shape = task->shape;
  shape->queue->Push(task);
  if (!shape->cpu) MaybeRequestLeases(shape);
}

void JobRuntime::MaybeRequestLeases(TaskShape* shape) {
  ShapeQueue* q = shape->queue;
  std::vector<pool::LeaseRequest> to_request;
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    if (stopping_.load() || !shape->refused.ok()) return;
    int target = static_cast<int>(std::min<size_t>(options_.max_leases_per_shape,
                                                   q->size() + q->leases_held));
    while (q->leases_held + q->leases_requested < target) {
      pool::LeaseRequest r = shape->request;
      r.id = absl::StrCat(job_id_, "/", shape->team, "/", reinterpret_cast<uintptr_t>(shape) % 100000,
                          "/", q->next_request++);
      pending_requests_[r.id] = shape;
      ++q->leases_requested;
      to_request.push_back(std::move(r));
    }
  }
  // A refusal comes back through OnRequestFailed, now or later.
  for (pool::LeaseRequest& r : to_request) pool_->Submit(std::move(r), this);
}

void JobRuntime::RefuseShape(TaskShape* shape, const absl::Status& why) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    first = shape->refused.ok();
    if (first) shape->refused = why;
  }
  // Several requests of the shape may be refused: the job hears of it once.
  if (first) Emit("request-refused", shape->team, "", std::string(why.message()));
  for (Task* t : shape->queue->TakeAll()) {
    FailTask(t, static_cast<ErrorCode>(why.code()), "submit",
             absl::StrCat("the pool refused its lease request: ", why.message()));
  }
}

void JobRuntime::OnGranted(const pool::Lease& lease) {
  // A grant may still arrive while the destructor runs (for a request it withdrew, granted before
  // the withdrawal got there); the destructor resets pool_ only once no grant is being handled
  // here, and a grant that arrives once it is stopping is left alone: the pool takes the lease
  // back when the job's connection closes (or, embedded, when it stops).
  granting_.fetch_add(1);
  absl::Cleanup handled = [this] { granting_.fetch_sub(1); };
  if (stopping_.load()) return;
  auto run = std::make_unique<LeaseRun>();
  run->lease = lease;
  std::vector<std::string> places;
  const pool::SlotShape& slot = lease.request.slot;
  for (const pool::GpuRef& ref : lease.gpus) {
    const pool::InventoryGpu* gpu = local_.Find(ref);
    GpuMemoryPool* memory = MemoryPoolFor(ref);
    SlotInfo info;
    info.node = ref.node;
    info.gpu_index = ref.index;
    info.model = gpu != nullptr ? gpu->device.model : "";
    info.cuda_device = memory != nullptr ? memory->cuda_device() : -1;
    info.kind = std::string(pool::SlotKindName(slot.kind));
    info.compute_milli = pool::SlotComputeMilli(slot, gpu != nullptr ? gpu->model : nullptr);
    uint64_t gpu_bytes = gpu != nullptr ? gpu->device.memory_mib * kMiB : 0;
    info.memory_budget_bytes =
        slot.kind == pool::SlotKind::kFraction ? static_cast<uint64_t>(slot.memory_mib) * kMiB : gpu_bytes;
    run->slots.push_back(info);
    places.push_back(absl::StrCat(ref.node, "/GPU ", ref.index));
  }
  run->location = absl::StrJoin(places, "+");
  run->gpus = static_cast<double>(lease.milli) / 1000.0;
  if (!lease.gpus.empty()) {
    run->memory = MemoryPoolFor(lease.gpus.front());
    run->budget = std::make_shared<MemoryBudget>();
    run->budget->team = lease.request.team;
    run->budget->lease = lease.id;
    run->budget->limit_bytes = run->slots.front().memory_budget_bytes;
    if (run->memory != nullptr) {
      absl::StatusOr<void*> stream = run->memory->AcquireStream();
      // Without a stream of its own the lease shares the pool's: slower, never wrong.
      run->stream = stream.ok() ? *stream : nullptr;
      run->budget->stream = run->stream;
    }
  }
  LeaseRun* raw = run.get();
  bool keep = false;
  // Workers that have given their lease back, reaped here. They are joined only after
  // leases_mu_ is released: a finished worker may still be taking that lock (to ask for the next
  // lease of its shape), and joining it under the lock deadlocked the job. Once the runtime is
  // stopping, its destructor joins every worker, so none is reaped here (a thread joined twice,
  // or freed under the destructor's join, hung rank 0 of an mpirun job at exit).
  std::vector<std::unique_ptr<LeaseRun>> reaped;
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    for (auto it = finished_runs_.begin(); it != finished_runs_.end();) {
      if ((*it)->finished.load() && !stopping_.load()) {
        reaped.push_back(std::move(*it));
        it = finished_runs_.erase(it);
      } else {
        ++it;
      }
    }
    auto pending = pending_requests_.find(lease.request.id);
    if (pending != pending_requests_.end() && !stopping_.load()) {
      run->shape = pending->second;
      pending_requests_.erase(pending);
      --run->shape->queue->leases_requested;
      ++run->shape->queue->leases_held;
      keep = true;
      runs_[lease.id] = std::move(run);
    }
  }
  for (auto& done : reaped) {
    if (done->thread.joinable()) done->thread.join();
  }
  reaped.clear();
  if (!keep) {
    (void)pool_->Release(lease.id);  // granted after we stopped wanting it
    return;
  }
  Emit("lease-granted", lease.request.team, lease.id,
       absl::StrCat(raw->location, " ", pool::SlotKindName(slot.kind),
                    slot.kind == pool::SlotKind::kFraction ? absl::StrCat(" ", raw->gpus) : "",
                    lease.borrowing ? " (borrowed)" : ""));
  raw->thread = std::thread([this, raw] { LeaseWorker(raw); });
}

std::optional<std::string> JobRuntime::StopRun(const std::string& lease_id,
                                               std::atomic<bool> LeaseRun::*flag) {
  std::lock_guard<std::mutex> lock(leases_mu_);
  auto it = runs_.find(lease_id);
  if (it == runs_.end()) return std::nullopt;
  LeaseRun& run = *it->second;
  (run.*flag).store(true);
  run.stop.store(true);
  run.shape->queue->WakeAll();
  return run.lease.request.team;
}

void JobRuntime::OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) {
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    if (auto it = runs_.find(lease_id); it != runs_.end()) it->second->revoke_deadline_s.store(deadline_s);
  }
  if (std::optional<std::string> team = StopRun(lease_id, &LeaseRun::revoked)) {
    Emit("lease-revoked", *team, lease_id,
         absl::StrCat(pool::RevokeCauseName(cause), ", stop by pool time ", deadline_s, " s"));
  }
}

void JobRuntime::OnLost(const std::string& lease_id, const std::string& why) {
  if (std::optional<std::string> team = StopRun(lease_id, &LeaseRun::lost)) {
    Emit("lease-lost", *team, lease_id, why);
  }
}

void JobRuntime::OnRequestFailed(const std::string& request_id, const absl::Status& why) {
  TaskShape* shape = nullptr;
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    auto it = pending_requests_.find(request_id);
    if (it == pending_requests_.end()) return;
    shape = it->second;
    pending_requests_.erase(it);
    --shape->queue->leases_requested;
  }
  // The shape's queued tasks cannot get a lease: they fail with the reason, as a refused request's do.
  RefuseShape(shape, why);
}

void JobRuntime::CpuWorker() {
  constexpr size_t kMaxBatch = 32;
  Task* batch[kMaxBatch];
  size_t workers = cpu_threads_.size() > 0 ? cpu_threads_.size() : 1;
  while (true) {
    // Take a share of the backlog at a time: fewer lock round trips under load, and still every
    // worker busy when tasks are long.
    size_t want = std::clamp<size_t>(cpu_queue_.size() / (2 * workers), 1, kMaxBatch);
    size_t n = cpu_queue_.PopBatch(batch, want, std::chrono::steady_clock::time_point::max(), stopping_);
    if (n == 0) return;
    for (size_t i = 0; i < n; ++i) Execute(batch[i], nullptr);
  }
}

void JobRuntime::LeaseWorker(LeaseRun* run) {
  ShapeQueue* q = run->shape->queue;
  const auto linger = std::chrono::milliseconds(options_.lease_linger_ms);
  while (!run->stop.load()) {
    Task* task = nullptr;
    if (q->PopBatch(&task, 1, std::chrono::steady_clock::now() + linger, run->stop) == 0) break;
    Execute(task, run);
  }
  bool lost = run->lost.load();
  // Reported before the release, so the event log never shows the capacity reused before it
  // was returned.
  Emit(lost ? "lease-ended" : "lease-returned", run->lease.request.team, run->lease.id,
       run->revoked.load() ? "after revocation" : (lost ? "lost" : "idle"));
  if (run->memory != nullptr) run->memory->ReleaseStream(run->stream);
  if (!lost) (void)pool_->Release(run->lease.id);
  {
    std::lock_guard<std::mutex> lock(leases_mu_);
    --q->leases_held;
    auto it = runs_.find(run->lease.id);
    if (it != runs_.end()) {
      finished_runs_.push_back(std::move(it->second));
      runs_.erase(it);
    }
    run->finished.store(true);
  }
  // Tasks that arrived while this lease was winding down need a lease of their own; with no
  // backlog, requests still queued at the pool are withdrawn so no unneeded lease is granted.
  if (q->size() > 0 && !stopping_.load()) {
    MaybeRequestLeases(run->shape);
  } else {
    std::lock_guard<std::mutex> lock(leases_mu_);
    for (auto it = pending_requests_.begin(); it != pending_requests_.end();) {
      if (it->second == run->shape && pool_->Withdraw(it->first).ok()) {
        --q->leases_requested;
        it = pending_requests_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void JobRuntime::Execute(Task* task, LeaseRun* lease) {
  std::string location = lease != nullptr ? lease->location : "cpu";
  if (task->cancelled.load()) {
    FailTask(task, ErrorCode::kCancelled, location, "cancelled before it ran");
    return;
  }
  detail::TaskState state{this, task, lease};
  state.started_pool_s = pool_->Now();
  TaskContext context(&state);
  detail::TaskCall call;
  call.args = task->args;
  call.deps = task->deps.data();
  call.dep_count = task->deps.size();
  call.context = &context;
  std::exception_ptr failure;
  ErrorCode code = ErrorCode::kUnknown;
  std::string message;
  std::string cause;
  auto started = std::chrono::steady_clock::now();
  try {
    task->function->invoke(call);
  } catch (const ErrorWithCause& e) {
    code = e.code();
    message = e.what();
    cause = e.cause();
  } catch (const TaskError& e) {
    code = e.code();
    message = e.what();  // a nested Get failed: keep the whole chain
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "a non-standard exception";
  }
  if (state.checkpointable) EndCheckpointableRun(state);
  bool threw = call.result == nullptr;
  if (lease != nullptr) {
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    task->shape->counters.busy_gpu_micros.fetch_add(
        static_cast<int64_t>(took.count() * options_.clock_speed * lease->gpus * 1e6),
        std::memory_order_relaxed);
  }
  // A lease taken away mid-task: the task runs again on another lease, resuming from its last
  // snapshot. A revocation (preemption) is not a failure; a lost lease counts against max_retries.
  if (lease != nullptr && (lease->lost.load() || lease->revoked.load()) && !task->cancelled.load()) {
    bool failed = Preempted(task, lease, state);
    if (!failed || ++task->system_failures <= task->shape->options.max_retries) {
      ++task->attempt;
      Enqueue(task);
      return;
    }
    FailTask(task, ErrorCode::kUnavailable, location,
             absl::StrCat("its lease ", lease->lease.id, " was lost and its ",
                          task->shape->options.max_retries, " retries are used up"));
    return;
  }
  if (task->cancelled.load()) {
    FailTask(task, ErrorCode::kCancelled, location, "cancelled while running");
  } else if (threw) {
    FailTask(task, code, location, message, cause);
  } else {
    task->shape->counters.tasks_run.fetch_add(1, std::memory_order_relaxed);
    Finish(task, std::move(call.result), nullptr);
  }
}

void JobRuntime::FailTask(Task* task, ErrorCode code, const std::string& location,
                          const std::string& message, const std::string& cause) {
  if (code != ErrorCode::kCancelled) task->shape->counters.tasks_failed.fetch_add(1, std::memory_order_relaxed);
  Finish(task, nullptr,
         MakeTaskError(code, task->name(), task->id, task->attempt, location, message, cause));
}

void JobRuntime::Finish(Task* task, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure) {
  if (task->checkpoint_key != nullptr) {  // done with them
    checkpoints_->Forget(*task->checkpoint_key);
    pool_->ForgetCheckpoints(*task->checkpoint_key);
  }
  std::vector<Task*> waiting = failure ? store_->Fail(task->result, std::move(failure))
                                       : store_->Complete(task->result, std::move(value));
  ObjectEntry* result = task->result;
  for (detail::ObjectHeader* h : task->deps) detail::Release(h);
  for (detail::ObjectHeader* h : task->nested) detail::Release(h);
  delete task;
  for (Task* t : waiting) DependencyResolved(t, result);
  detail::Release(result);
}

void JobRuntime::Cancel(detail::ObjectHeader* object) {
  auto* entry = static_cast<ObjectEntry*>(object);
  Task* producer;
  {
    std::lock_guard<std::mutex> lock(entry->mu);
    producer = entry->producer;
    if (producer == nullptr) return;  // resolved, or a Put value
    producer->cancelled.store(true);
  }
  // Fail the result now; whoever runs or dequeues the task later drops it. Waiters see kCancelled
  // at once, and tasks depending on it fail.
  std::vector<Task*> waiting = store_->Fail(
      entry, MakeTaskError(ErrorCode::kCancelled, "?", 0, 0, "-", "cancelled"));
  for (Task* t : waiting) DependencyResolved(t, entry);
}

detail::ObjectHeader* JobRuntime::Put(std::unique_ptr<detail::ValueBox> value) {
  return store_->CreateReady(std::move(value));
}

void JobRuntime::Emit(const std::string& kind, const std::string& team, const std::string& lease,
                      const std::string& detail) {
  if (!options_.on_event) return;
  options_.on_event(RuntimeEvent{pool_ != nullptr ? pool_->Now() : 0, kind, team, lease, detail});
}

RuntimeStats JobRuntime::Stats() const {
  RuntimeStats stats;
  stats.pool_time_s = pool_->Now();
  stats.pool_gpus = pool_->capacity_gpus();
  std::map<std::string, TeamUsage> teams;
  for (const auto& [team, ledger] : pool_->Ledger()) {
    TeamUsage& u = teams[team];
    u.leased_gpu_hours = ledger.leased_gpu_s / 3600;
    u.borrowed_gpu_hours = ledger.borrowed_gpu_s / 3600;
    u.leases = ledger.leases;
  }
  {
    std::lock_guard<std::mutex> lock(shapes_mu_);
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
    for (const auto& q : queues_) stats.queued_tasks += q->size();
    stats.waiting_for_dependencies = static_cast<uint64_t>(
        std::max<int64_t>(0, waiting_for_dependencies_.load(std::memory_order_relaxed)));
  }
  stats.queued_tasks += cpu_queue_.size();
  stats.overdue = OverdueTasks();
  for (auto& [team, u] : teams) {
    u.team = team;
    stats.teams.push_back(u);
  }
  for (const auto& [key, memory] : memory_pools_) stats.scrubbed_bytes += memory->scrubbed_bytes();
  stats.live_objects = store_->live_objects();
  return stats;
}

}  // namespace gpupool::runtime
