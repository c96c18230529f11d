// File: runtime/tasks/executor.cc
#include "runtime/tasks/executor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpupool/task_context.h"
#include "runtime/tasks/remote_objects.h"
#include "runtime/tasks/shape_queue.h"

namespace gpupool::runtime {

std::exception_ptr MakeTaskError(ErrorCode code, const std::string& task_name, uint64_t task_id,
                                 int attempt, const std::string& location,
                                 const std::string& message, const std::string& cause) {
  std::string what = absl::StrCat("task '", task_name, "' (task ", task_id, ", attempt ",
                                  attempt + 1, ") on ", location, ": ", message);
  return std::make_exception_ptr(TaskError(code, what, task_name, location, message, cause));
}

Executor::Executor(Deps deps)
    : runtime_(deps.runtime),
      pool_(*deps.pool),
      store_(*deps.store),
      shapes_(*deps.shapes),
      leases_(*deps.leases),
      checkpoints_(*deps.checkpoints),
      events_(*deps.events),
      stopping_(*deps.stopping),
      clock_speed_(deps.clock_speed),
      lease_linger_ms_(deps.lease_linger_ms) {}

void Executor::StartCpuWorkers(int workers) {
  cpu_workers_ = workers > 0 ? static_cast<size_t>(workers) : 1;
  for (int i = 0; i < workers; ++i) cpu_threads_.emplace_back([this] { CpuWorker(); });
}

void Executor::JoinCpuWorkers() {
  for (std::thread& t : cpu_threads_) t.join();
}

void Executor::Admit(Task* t) {
  if (stopping_.load(std::memory_order_relaxed)) {
    FailTask(t, ErrorCode::kCancelled, "submit", "the runtime is shutting down");
    return;
  }
  if (!t->shape->refused.ok()) {
    const absl::Status& why = t->shape->refused;
    FailTask(t, static_cast<ErrorCode>(why.code()), "submit", std::string(why.message()));
    return;
  }
  const bool in_workers = this->in_workers();  // set once, before any task
  const size_t waits = Waits(t);
  t->unresolved.store(static_cast<int>(waits) + 1, std::memory_order_relaxed);
  if (waits > 0) waiting_for_dependencies_.fetch_add(1, std::memory_order_relaxed);
  // A CPU task runs in this process: its inputs are fetched here before it is queued.
  const bool need_values = !in_workers || t->shape->cpu;
  for (detail::ObjectHeader* h : t->deps) {
    auto* entry = static_cast<ObjectEntry*>(h);
    if (!store_.AddDependent(entry, t, need_values)) DependencyResolved(t, entry);
  }
  if (in_workers) {
    for (detail::ObjectHeader* h : t->nested) {
      // Only for it to be made: a value a worker keeps will do, and is not fetched here for this
      // (a task reading it has it fetched through this driver then).
      auto* entry = static_cast<ObjectEntry*>(h);
      if (!store_.AddDependent(entry, t, /*need_value=*/false)) DependencyResolved(t, entry);
    }
  }
  if (t->unresolved.fetch_sub(1, std::memory_order_acq_rel) == 1) MakeRunnable(t);
}

size_t Executor::Waits(const Task* t) const {
  return t->deps.size() + (in_workers() ? t->nested.size() : 0);
}

void Executor::DependencyResolved(Task* task, ObjectEntry* dependency) {
  // A nested ref is waited for, not read: its failure is the task's to find when it reads it.
  if (dependency->state.load(std::memory_order_acquire) == detail::kObjectFailed &&
      std::find(task->deps.begin(), task->deps.end(), dependency) != task->deps.end()) {
    bool expected = false;
    if (task->dependency_failed.compare_exchange_strong(expected, true)) {
      task->dependency_failure = dependency->failure;
    }
  }
  if (task->unresolved.fetch_sub(1, std::memory_order_acq_rel) == 1) MakeRunnable(task);
}

void DescribeDependencyFailure(std::exception_ptr failure, std::string* why, std::string* cause) {
  *why = "a dependency failed";
  try {
    std::rethrow_exception(failure);
  } catch (const TaskError& e) {
    *why = absl::StrCat("a dependency failed: ", e.what());
    *cause = e.cause();
  } catch (const std::exception& e) {
    *why = absl::StrCat("a dependency failed: ", e.what());
  } catch (...) {
  }
}

void Executor::MakeRunnable(Task* task) {
  if (Waits(task) > 0) waiting_for_dependencies_.fetch_sub(1, std::memory_order_relaxed);
  if (task->dependency_failed.load(std::memory_order_acquire)) {
    std::string why, cause;
    DescribeDependencyFailure(task->dependency_failure, &why, &cause);
    FailTask(task, ErrorCode::kAborted, "submit", why, cause);
    return;
  }
  Enqueue(task);
}

void Executor::Requeue(Task* task) {
  auto remaking = [](detail::ObjectHeader* h) { return static_cast<ObjectEntry*>(h)->BeingRemade(); };
  // Its nested refs too where tasks run in workers: Admit waits for those to be made there.
  if (std::any_of(task->deps.begin(), task->deps.end(), remaking) ||
      (in_workers() && std::any_of(task->nested.begin(), task->nested.end(), remaking))) {
    Admit(task);  // waits for them unleased, as when it was submitted
    return;
  }
  Enqueue(task);
}

bool Executor::AwaitInputs(Task* task, LeaseRun* lease, RunOutcome* out) {
  for (detail::ObjectHeader* h : task->deps) {
    auto* entry = static_cast<ObjectEntry*>(h);
    while (entry->state.load(std::memory_order_acquire) == detail::kObjectPending) {
      if (entry->BeingRemade()) {
        // Its keeper died and its task runs again, perhaps on the very room this lease holds:
        // handed back, to wait unleased (Requeue).
        out->kind = RunOutcome::Kind::kNotRun;
        return false;
      }
      if (task->cancelled.load()) {
        out->kind = RunOutcome::Kind::kCancelled;
        out->message = "cancelled before it ran";
        return false;
      }
      if (lease != nullptr && lease->stop.load()) {
        out->kind = RunOutcome::Kind::kNotRun;  // its lease went before it started
        return false;
      }
      try {
        (void)store_.Await(entry, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
      } catch (...) {  // still pending (the deadline), or failed: the loop and the check below tell
      }
    }
    if (entry->state.load(std::memory_order_acquire) == detail::kObjectFailed) {
      // Failed because its process is stopping; or, in a worker, the driver said the value is
      // being made again (TaskInputs marks the input so): handed back either way.
      if ((lease != nullptr && lease->stop.load()) || entry->remade_at_driver.load(std::memory_order_acquire)) {
        out->kind = RunOutcome::Kind::kNotRun;
        return false;
      }
      out->kind = RunOutcome::Kind::kFailed;
      out->code = ErrorCode::kAborted;
      DescribeDependencyFailure(entry->failure, &out->message, &out->cause);
      return false;
    }
  }
  return true;
}

void Executor::Enqueue(Task* task) {
  if (drained_.load(std::memory_order_acquire)) {
    FailTask(task, ErrorCode::kCancelled, "queue", "the runtime shut down");
    return;
  }
  TaskShape* shape = task->shape;
  shape->queue->Push(task);
  if (!shape->cpu) leases_.MaybeRequestLeases(shape);
}

void Executor::CpuWorker() {
  constexpr size_t kMaxBatch = 32;
  Task* batch[kMaxBatch];
  ShapeQueue& queue = shapes_.cpu_queue();
  while (true) {
    // Take a share of the backlog at a time: fewer lock round trips under load, and still every
    // worker busy when tasks are long.
    size_t want = std::clamp<size_t>(queue.size() / (2 * cpu_workers_), 1, kMaxBatch);
    size_t n = queue.PopBatch(batch, want, std::chrono::steady_clock::time_point::max(), stopping_);
    if (n == 0) return;
    for (size_t i = 0; i < n; ++i) Execute(batch[i], nullptr);
  }
}

void Executor::RunLeaseTasks(LeaseRun* run) {
  ShapeQueue* q = run->shape->queue;
  const auto linger = std::chrono::milliseconds(lease_linger_ms_);
  while (!run->stop.load()) {
    Task* task = nullptr;
    if (q->PopBatch(&task, 1, std::chrono::steady_clock::now() + linger, run->stop) == 0) break;
    Execute(task, run);
  }
}

void Executor::Execute(Task* task, LeaseRun* lease) { Settle(task, Run(task, lease)); }

RunOutcome Executor::Run(Task* task, LeaseRun* lease) {
  RunOutcome out;
  out.location = lease != nullptr ? lease->location : "cpu";
  if (lease != nullptr) out.lease_id = lease->lease.id;
  if (task->cancelled.load()) {
    out.kind = RunOutcome::Kind::kCancelled;
    out.message = "cancelled before it ran";
    return out;
  }
  if (!AwaitInputs(task, lease, &out)) return out;
  detail::TaskState state{runtime_, task, lease};
  state.started_pool_s = pool_.Now();
  TaskContext context(&state);
  detail::TaskCall call;
  call.args = task->args;
  call.deps = task->deps.data();
  call.dep_count = task->deps.size();
  call.context = &context;
  // The lease's first GPU is current on the task's thread (the runtime's own CUDA calls restore it).
  if (lease != nullptr && lease->first_memory() != nullptr) MakeDeviceCurrent(lease->first_memory()->pool->cuda_device());
  auto started = std::chrono::steady_clock::now();
  try {
    task->function->invoke(call);
  } catch (const ErrorWithCause& e) {
    out.code = e.code();
    out.message = e.what();
    out.cause = e.cause();
  } catch (const TaskError& e) {
    out.code = e.code();
    out.message = e.what();  // a nested Get failed: keep the whole chain
  } catch (const Error& e) {
    out.code = e.code();
    out.message = e.what();
  } catch (const std::exception& e) {
    out.message = e.what();
  } catch (...) {
    out.message = "a non-standard exception";
  }
  if (state.checkpointable) checkpoints_.EndCheckpointableRun(state);
  if (lease != nullptr) {
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    out.busy_gpu_micros = static_cast<int64_t>(took.count() * clock_speed_ * lease->gpus * 1e6);
    lease->busy_gpu_micros.fetch_add(out.busy_gpu_micros, std::memory_order_relaxed);
  }
  // A lease taken away mid-task: the task runs again on another lease, resuming from its last
  // snapshot. A revocation (preemption) is not a failure; a lost lease counts against max_retries.
  if (lease != nullptr && (lease->lost.load() || lease->revoked.load()) && !task->cancelled.load()) {
    out.kind = RunOutcome::Kind::kStopped;
    StoppedRun(lease, state, out);
  } else if (task->cancelled.load()) {
    out.kind = RunOutcome::Kind::kCancelled;
    out.message = "cancelled while running";
  } else if (call.result == nullptr) {
    out.kind = RunOutcome::Kind::kFailed;
  } else {
    out.kind = RunOutcome::Kind::kDone;
    out.value = std::move(call.result);
  }
  return out;
}

void Executor::StoppedRun(LeaseRun* lease, const detail::TaskState& state, RunOutcome& out) {
  out.system_failure = lease->lost.load() && !state.snapshot_at_stop;
  double now = pool_.Now();
  double since = state.snapshot_at_stop ? now
                 : state.last_snapshot_pool_s >= 0 ? state.last_snapshot_pool_s
                                                   : state.started_pool_s;
  out.lost_gpu_micros = static_cast<int64_t>(std::max(0.0, now - since) * lease->gpus * 1e6);
  out.resume_note = state.snapshot_at_stop ? absl::StrCat("snapshot at step ", state.step, ", resumes there")
                    : state.checkpointable ? "resumes from its previous snapshot"
                                           : "not checkpointable: restarts";
}

void Executor::Settle(Task* task, RunOutcome outcome) {
  ShapeCounters& c = task->shape->counters;
  c.busy_gpu_micros.fetch_add(outcome.busy_gpu_micros, std::memory_order_relaxed);
  switch (outcome.kind) {
    case RunOutcome::Kind::kNotRun:
      Requeue(task);
      return;
    case RunOutcome::Kind::kStopped: {
      c.preemptions.fetch_add(1, std::memory_order_relaxed);
      c.lost_gpu_micros.fetch_add(outcome.lost_gpu_micros, std::memory_order_relaxed);
      events_.Emit("task-preempted", task->shape->team, outcome.lease_id,
                   absl::StrCat("task '", task->name(), "' (", outcome.system_failure ? "lease lost" : "revoked",
                                "): ", outcome.resume_note, "; lost ",
                                absl::StrFormat("%.0f", static_cast<double>(outcome.lost_gpu_micros) / 1e6), " GPU-s"));
      if (!outcome.system_failure || ++task->system_failures <= task->shape->options.max_retries) {
        ++task->attempt;
        Requeue(task);
        return;
      }
      FailTask(task, ErrorCode::kUnavailable, outcome.location,
               absl::StrCat("its lease ", outcome.lease_id, " was lost and its ",
                            task->shape->options.max_retries, " retries are used up"));
      return;
    }
    case RunOutcome::Kind::kCancelled:
      FailTask(task, ErrorCode::kCancelled, outcome.location, outcome.message);
      return;
    case RunOutcome::Kind::kFailed:
      FailTask(task, outcome.code, outcome.location, outcome.message, outcome.cause);
      return;
    case RunOutcome::Kind::kDone:
      if (task->cancelled.load()) {  // a remote run finished after the task was cancelled here
        FailTask(task, ErrorCode::kCancelled, outcome.location, "cancelled while running");
        return;
      }
      c.tasks_run.fetch_add(1, std::memory_order_relaxed);
      Finish(task, std::move(outcome.value), nullptr, outcome.value_elsewhere);
      return;
  }
}

void Executor::FailTask(Task* task, ErrorCode code, const std::string& location,
                        const std::string& message, const std::string& cause) {
  if (code != ErrorCode::kCancelled) task->shape->counters.tasks_failed.fetch_add(1, std::memory_order_relaxed);
  Finish(task, nullptr,
         MakeTaskError(code, task->name(), task->id, task->attempt, location, message, cause));
}

void Executor::Finish(Task* task, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure,
                      bool value_elsewhere) {
  if (task->checkpoint_key != nullptr) checkpoints_.Forget(*task->checkpoint_key);  // done with them
  std::vector<Task*> waiting = failure          ? store_.Fail(task->result, std::move(failure))
                               : value_elsewhere ? std::vector<Task*>()
                                                 : store_.Complete(task->result, std::move(value));
  ObjectEntry* result = task->result;
  RemoteObjects* keeper = lineage_keeper_.load(std::memory_order_acquire);
  // Kept, the task is the keeper's from here: it holds its inputs, not its result.
  if (!(value_elsewhere && keeper != nullptr && keeper->KeepLineage(task))) DeleteTaskReleasingInputs(task);
  for (Task* t : waiting) DependencyResolved(t, result);
  detail::Release(result);
}

std::vector<absl::Status> Executor::Rebuild(const std::vector<std::pair<Task*, ObjectEntry*>>& lost) {
  std::vector<absl::Status> why(lost.size());
  std::vector<Task*> again;
  for (size_t i = 0; i < lost.size(); ++i) {
    auto [task, result] = lost[i];
    const int retries = task->shape->options.max_retries;
    if (stopping_.load(std::memory_order_relaxed)) {
      why[i] = absl::CancelledError("the runtime is shutting down");
    } else if (task->system_failures >= retries) {
      why[i] = absl::ResourceExhaustedError(absl::StrCat("its task '", task->name(), "' (id ", task->id,
                                                         ") has no retry left to make it again (max_retries ", retries,
                                                         ", ", task->system_failures, " used)"));
    } else if (!store_.MarkRemade(result, task)) {
      why[i] = absl::FailedPreconditionError("it was resolved meanwhile");
    }
    if (!why[i].ok()) continue;
    ++task->system_failures;
    ++task->attempt;
    task->result = result;
    task->cancelled.store(false);
    task->dependency_failed.store(false);
    task->dependency_failure = nullptr;
    events_.Emit("object-rebuilt", task->shape->team, "",
                 absl::StrCat("task '", task->name(), "' (id ", task->id, ") runs again (attempt ", task->attempt + 1,
                              ") to make its result, whose only copy was lost with its worker"));
    again.push_back(task);
  }
  for (Task* task : again) Admit(task);
  return why;
}

void Executor::Drain() {
  drained_.store(true, std::memory_order_release);
  // Whatever is still queued will never run.
  for (Task* t : shapes_.TakeAll()) FailTask(t, ErrorCode::kCancelled, "queue", "the runtime shut down");
}

}  // namespace gpupool::runtime
