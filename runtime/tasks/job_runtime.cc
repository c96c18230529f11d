// File: runtime/tasks/job_runtime.cc
//
// JobRuntime: building its parts (Start), the calls it forwards to them, and shutting them down
// in order (the destructor).
#include "runtime/tasks/job_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/internal/task_options_codec.h"
#include "pool/devices/device_driver.h"
#include "runtime/client/fresh_token.h"
#include "runtime/objects/host_memory.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/function_registry.h"

namespace gpupool::runtime {

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
  absl::StatusOr<std::unique_ptr<LocalGpus>> local = LocalGpus::Discover(joined.local_nodes);
  if (!local.ok()) return local.status();
  rt->gpus_ = *std::move(local);
  rt->pool_ = std::move(joined.pool);
  rt->embedded_ = joined.embedded;
  rt->node_label_ = std::move(joined.node_label);
  rt->pinned_ = joined.pinned;
  rt->rank_ = joined.rank;
  rt->ranks_ = joined.ranks;
  rt->notice_ = std::move(joined.notice);
  rt->hosted_ = std::move(joined.hosted);
  rt->before_stop_ = std::move(joined.before_stop);
  rt->group_ = joined.group != nullptr ? std::move(joined.group) : JobGroup::Solo();
  rt->device_comm_ = std::make_unique<RankDeviceComm>(*rt->group_, absl::Seconds(rt->options_.collective_timeout_s));
  // Host and pid say whose it is; 32 random bits keep it unique where those repeat (a container's
  // driver is often pid 1, and hosts reuse pids), so two jobs sharing a checkpoint directory never
  // share snapshot keys, and it cannot be guessed from the pid. (It is a name, not a credential:
  // what a job may do is bound to its key.)
  rt->job_id_ = absl::StrCat("job-", pool::HostName(), "-", getpid(), "-", absl::Hex(std::random_device{}(), absl::kZeroPad8));
  // Ids name their rank, so refs can cross ranks (runtime/objects/object_exchange.h).
  rt->store_->SetIdBase(static_cast<ObjectId>(rt->group_->rank()) << ObjectStore::kRankShift);
  if (absl::Status s = rt->StartParts(joined); !s.ok()) return s;
  rt->StartEngine();
  if (joined.workers.has_value()) {
    if (absl::Status s = rt->StartWorkers(*std::move(joined.workers), joined.driver); !s.ok()) return s;
  }
  return rt;
}

void JobRuntime::EndDeviceUse(LeaseRun& run) {
  run.slots_comm.reset();
  for (const SlotInfo& slot : run.slots) device_comm_->Forget(slot.node, slot.gpu_index);
}

absl::Status JobRuntime::StartParts(JoinedPool& joined) {
  const RuntimeOptions& o = options_;
  // The exchange calls back only for refs this process imported, so never before Start returned:
  // the engine (executor_) stands by then.
  absl::StatusOr<std::unique_ptr<ObjectExchange>> exchange = ObjectExchange::Start(
      *group_, *store_,
      [this](ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure) {
        std::vector<Task*> waiting = failure ? store_->Fail(entry, std::move(failure))
                                             : store_->Complete(entry, std::move(value));
        for (Task* t : waiting) executor_->DependencyResolved(t, entry);
      },
      [this](const Lineage& lineage, ObjectId lost) -> detail::ObjectHeader* {
        const detail::FunctionInfo* function = detail::FunctionNamed(lineage.function);
        if (function == nullptr) {
          throw Error(ErrorCode::kNotFound, absl::StrCat("this program has no remote function '", lineage.function, "'"));
        }
        events_.Emit("object-rebuilt", lineage.options.team, "",
                     absl::StrCat("object ", lost, " of rank ", ObjectExchange::OwnerOf(lost), ": running '",
                                  lineage.function, "' again here"));
        return Submit(function, detail::EncodedArgs{lineage.args, {}, {}}, &lineage.options,
                      lineage.checkpoint_key);
      },
      ObjectExchange::Options{.patience = absl::Seconds(o.collective_timeout_s),
                              .lineage_of = [job_id = job_id_](const Task& producer) -> std::optional<Lineage> {
                                // A task with inputs or nested refs cannot be rerun from its
                                // arguments alone.
                                if (!producer.deps.empty() || !producer.nested.empty()) return std::nullopt;
                                return Lineage{producer.function->name, producer.args, producer.shape->options,
                                               CheckpointKey(job_id, producer.id)};
                              },
                              .access_key = std::move(joined.object_access_key)});
  if (!exchange.ok()) return exchange.status();
  exchange_ = *std::move(exchange);
  checkpoints_ = std::make_unique<CheckpointCoordinator>(CheckpointCoordinator::Deps{
      .store = CheckpointServiceOptions{.dir = o.checkpoint_dir, .shared = o.checkpoint_dir_shared,
                                        .keep_last = o.checkpoint_keep_last,
                                        .staging_bytes = o.checkpoint_staging_mib << 20},
      .pool = pool_.get(),
      .events = &events_,
      .job_id = job_id_,
      .clock_speed = o.clock_speed});
  return gpus_->OpenMemoryPools(joined.driver == "nvidia");
}

void JobRuntime::StartEngine() {
  shapes_ = std::make_unique<TaskShapes>(options_.team, pinned_ ? node_label_ : std::string(),
                                         pinned_ ? std::string() : node_label_, *pool_, gpus_->inventory());
  // The lease manager calls the executor only for a granted or refused request, which needs a
  // task enqueued by the executor: it stands by then.
  leases_ = std::make_unique<LeaseManager>(LeaseManager::Deps{
      .pool = pool_.get(),
      .gpus = gpus_.get(),
      .events = &events_,
      .stopping = &stopping_,
      .job_id = job_id_,
      .max_leases_per_shape = options_.max_leases_per_shape,
      .run_tasks = [this](LeaseRun* run) {
        if (run->remote) {
          remote_->RunLeaseTasks(run);
        } else {
          executor_->RunLeaseTasks(run);
          EndDeviceUse(*run);
        }
      },
      .fail_task = [this](Task* task, ErrorCode code, const std::string& location,
                          const std::string& message) { executor_->FailTask(task, code, location, message); },
      // workers_ is set once, by StartWorkers, before the runtime takes its first task.
      .worker_nodes = [this] { return workers_ != nullptr ? workers_->ConnectedNodes() : std::vector<std::string>(); }});
  executor_ = std::make_unique<Executor>(Executor::Deps{
      .runtime = this,
      .pool = pool_.get(),
      .store = store_.get(),
      .shapes = shapes_.get(),
      .leases = leases_.get(),
      .checkpoints = checkpoints_.get(),
      .events = &events_,
      .stopping = &stopping_,
      .clock_speed = options_.clock_speed,
      .lease_linger_ms = options_.lease_linger_ms});
  remote_ = std::make_unique<RemoteLeases>(RemoteLeases::Deps{
      .executor = executor_.get(), .events = &events_, .job_id = job_id_, .lease_linger_ms = options_.lease_linger_ms,
      .stopping = &stopping_});
  int workers = options_.cpu_workers > 0 ? options_.cpu_workers
                                         : std::max(1u, std::thread::hardware_concurrency());
  executor_->StartCpuWorkers(workers);
}

absl::Status JobRuntime::StartWorkers(WorkerPlan plan, const std::string& driver) {
  const RuntimeOptions& o = options_;
  WorkerPoolOptions wo;
  wo.pool = pool_.get();
  wo.job_id = job_id_;
  wo.launch = std::move(plan.launch);
  wo.launch.job = job_id_;
  wo.listen_host = plan.listen_host;
  wo.describe_node = std::move(plan.describe_node);
  wo.welcome = wire::Welcome{.team = o.team,
                             .driver = driver,
                             .clock_speed = o.clock_speed,
                             .checkpoint_dir = o.checkpoint_dir,
                             .checkpoint_dir_shared = o.checkpoint_dir_shared,
                             .checkpoint_keep_last = o.checkpoint_keep_last,
                             .checkpoint_staging_mib = o.checkpoint_staging_mib,
                             .linger_ms = o.worker_linger_ms};
  wo.pool_now = [this] { return pool_->Now(); };
  remote_objects_ = std::make_shared<RemoteObjects>(
      store_.get(), [this](Task* t, ObjectEntry* entry) { executor_->DependencyResolved(t, entry); },
      [this](const std::vector<std::pair<Task*, ObjectEntry*>>& lost) { return executor_->Rebuild(lost); });
  store_->SetRemoteValues(remote_objects_);
  // The results workers keep are fetched over UCX, with a key of their own (UCX carries it in
  // clear; the job's secret, which admits workers, never leaves the workers' connections). UCX is
  // optional: without it those go over the workers' connections.
  if (absl::StatusOr<std::string> key = FreshToken(); key.ok()) {
    absl::StatusOr<std::unique_ptr<transport::UcxWorker>> ucx = transport::UcxWorker::Create(transport::UcxOptions{
        .net_devices = IsLoopbackHost(wo.listen_host) ? "lo" : "", .name = "the driver"});
    if (ucx.ok()) {
      absl::StatusOr<std::unique_ptr<transport::ObjectFetcher>> fetcher =
          transport::ObjectFetcher::Create(**ucx, *key);
      if (fetcher.ok()) {
        wo.welcome.objects_key = *key;  // none: workers serve nothing over UCX
        objects_ucx_ = *std::move(ucx);
        objects_fetcher_ = *std::move(fetcher);
        remote_objects_->UseUcx(objects_ucx_.get(), objects_fetcher_.get());
      }
    }
  }
  wo.on_objects_at = [this](WorkerConnection& from, const wire::ObjectsAt& at) {
    remote_objects_->ObjectsAt(from, at.ucx_address);
  };
  remote_->set_objects(remote_objects_.get());
  wo.on_outcomes = [this](WorkerConnection& from, std::vector<wire::Outcome> outcomes) {
    remote_->OnOutcomes(from, std::move(outcomes));
  };
  wo.on_lost = [this](WorkerConnection& gone, const absl::Status& why, bool bye) {
    // Values first: results it kept are being made again before its tasks in flight go back, so
    // one of those reading such a value waits for it unleased (Executor::Requeue).
    remote_objects_->OnLost(gone, why);
    remote_->OnLost(gone, why, bye);
  };
  wo.on_fetched = [this](WorkerConnection& from, const wire::FetchedView& answer) {
    remote_objects_->OnFetched(from, answer);
  };
  wo.on_borrow = [this](WorkerConnection& from, const wire::Borrow& borrow) {
    remote_objects_->Lend(from, borrow.object);
  };
  wo.on_release = [this](WorkerConnection& from, const wire::Release& release) {
    remote_objects_->Returned(from, release);
  };
  wo.on_submit = [this](WorkerConnection& from, wire::Submit&& submit) {
    const uint64_t request = submit.request;
    wire::Submitted answer{.request = request};
    absl::StatusOr<ObjectEntry*> result = SubmitFor(from, std::move(submit));
    if (result.ok()) {
      answer.object = (*result)->id;
      remote_objects_->HandOver(from, *result);  // before the answer: its Borrow finds it
    } else {
      answer.code = static_cast<int64_t>(result.status().code());
      answer.message = std::string(result.status().message());
    }
    from.PostFrame(wire::Encode(answer));
  };
  wo.on_checkpointed = [this](WorkerConnection&, const wire::Checkpointed& note) {
    pool_->Checkpointed(note.lease_id, CheckpointNote{note.task_key, note.version, note.step, note.path});
  };
  // A worker's import of one of this job's objects, answered from the connection's sender thread
  // (never the reader: see WorkerConnection::Post) once the object is resolved: a task may still
  // compute it, or another worker keep it (fetched from there meanwhile).
  wo.on_fetch = [this](WorkerConnection& from, const wire::Fetch& ask) {
    std::shared_ptr<ObjectEntry> entry(store_->Lookup(ask.object), [](ObjectEntry* e) { detail::Release(e); });
    // A value a worker keeps goes from there to the worker asking (it borrows the object
    // meanwhile, so the keeper keeps the bytes), not through here: unless it asks through here.
    if (wire::InputAt at{.object = ask.object}; entry != nullptr && !ask.through_driver &&
                                                entry->state.load(std::memory_order_acquire) == detail::kObjectPending &&
                                                remote_objects_->Locate(entry.get(), from, &at)) {
      from.PostFrame(wire::Encode(wire::FetchFrom{.request = ask.request, .at = std::move(at)}));
      return;
    }
    // A task's input being made again (its keeper died) is not waited for here: the task goes
    // back to wait for it unleased (Executor::Requeue), told so at once.
    auto remaking = [entry, for_input = ask.for_input] { return for_input && entry->BeingRemade(); };
    // Asked for once it is waited for here (not while it is being made again: the task goes back).
    auto wanted = std::make_shared<bool>(false);
    from.Post([this, entry, remaking, wanted, request = ask.request]() -> std::optional<std::string> {
      if (entry == nullptr) {
        return wire::Encode(wire::Fetched{.request = request,
                                          .code = static_cast<int64_t>(ErrorCode::kNotFound),
                                          .message = "it was freed, or never existed"});
      }
      if (remaking()) return wire::Encode(wire::Fetched{.request = request, .pending = true});
      if (entry->state.load(std::memory_order_acquire) == detail::kObjectPending) {
        if (!*wanted) {
          *wanted = true;
          store_->Want(entry.get());
        }
        return std::nullopt;
      }
      bool sent_value = false;
      std::string frame = wire::AnswerFetch(request, entry.get(), &sent_value);
      if (sent_value) bytes_fetched_by_workers_.fetch_add(frame.size(), std::memory_order_relaxed);
      return frame;
    });
  };
  if (o.log_to_driver) {
    wo.on_log = [job = job_id_](WorkerConnection& from, const wire::Log& line) {
      std::string text = absl::StrCat("(", job, " ", from.node(), " pid=", from.pid(), ") ", line.line, "\n");
      std::fwrite(text.data(), 1, text.size(), line.is_stderr ? stderr : stdout);
      std::fflush(line.is_stderr ? stderr : stdout);
    };
  }
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(std::move(wo));
  if (!pool.ok()) return pool.status();
  workers_ = *std::move(pool);
  remote_->set_workers(workers_.get());
  executor_->RunTasksInWorkers(remote_objects_.get());  // see executor.h for what changes
  return absl::OkStatus();
}

JobRuntime::~JobRuntime() {
  stopping_.store(true);
  // A lease thread waiting for a worker to start (up to its start timeout) gives up now.
  if (workers_ != nullptr) workers_->StopStarting();
  // Requests not granted yet are withdrawn; then the pool stops, so no callback runs after this.
  if (leases_ != nullptr) leases_->StopAll();
  if (shapes_ != nullptr) shapes_->WakeAll();
  if (executor_ != nullptr) executor_->JoinCpuWorkers();
  if (leases_ != nullptr) leases_->JoinWorkers();
  // Every lease thread is gone, so nothing is sent to a worker any more: they are told to stop.
  // (What they kept for this driver is lost with them: RemoteObjects fails those entries.)
  workers_.reset();
  if (remote_objects_ != nullptr) {
    remote_objects_->UseUcx(nullptr, nullptr);
    objects_fetcher_.reset();  // before its UCX worker
    objects_ucx_.reset();
    store_->SetRemoteValues(nullptr);  // the store may outlive this runtime
  }
  if (executor_ != nullptr) executor_->Drain();
  if (before_stop_) before_stop_();
  exchange_.reset();  // before the group whose worker it runs on
  if (leases_ != nullptr) leases_->WaitForGrants();  // see LeaseManager::OnGranted
  checkpoints_.reset();  // its writer's commit callbacks tell pool_ (SafePoint): drained first
  pool_.reset();
  // What this process hosts for the pool, newest first: the agent, its driver, then the head.
  hosted_.agent.reset();
  hosted_.driver.reset();
  hosted_.head.reset();
  // Runs may still own memory budgets shared with live DeviceBuffers; the pools must outlive those
  // buffers, which a well-behaved program has dropped by now.
  ObjectStore::Orphan(std::move(store_));
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
  task->shape = shapes_->ShapeFor(options);
  ObjectEntry* result = store_->CreatePending();
  detail::Retain(result);  // one for the caller, one for the task
  {
    // Nobody else knows the entry yet; the lock is uncontended (and what the field's guard says).
    MutexLock lock(&result->mu);
    result->producer = task.get();
  }
  task->result = result;
  executor_->Admit(task.release());
  return result;
}

absl::StatusOr<ObjectEntry*> JobRuntime::SubmitFor(WorkerConnection& from, wire::Submit&& m) {
  const detail::FunctionInfo* function = detail::FunctionNamed(m.function);
  if (function == nullptr) {
    return absl::NotFoundError(absl::StrCat("this driver's program has no remote function '", m.function, "'"));
  }
  TaskOptions options;
  try {
    Reader r(m.options);
    options = gpupool::Decode<TaskOptions>(r);
  } catch (const Error& e) {
    return absl::DataLossError(absl::StrCat("the task's options arrived unreadable: ", e.what()));
  }
  if (m.inline_deps.size() != m.inline_dep_values.size() || m.inline_nested.size() != m.inline_nested_values.size()) {
    return absl::DataLossError("the task's inline values do not match their places");
  }
  detail::EncodedArgs args;
  args.bytes = std::move(m.args);
  absl::Cleanup let_go = [&args] { detail::ReleaseRefs(args); };  // unless Submit takes them
  std::map<uint64_t, std::string*> dep_values, nested_values;
  for (size_t k = 0; k < m.inline_deps.size(); ++k) dep_values[m.inline_deps[k]] = &m.inline_dep_values[k];
  for (size_t k = 0; k < m.inline_nested.size(); ++k) nested_values[m.inline_nested[k]] = &m.inline_nested_values[k];
  // The worker borrows the driver's objects it names, so each is still here; one that is not
  // (a worker of another build, or one that let go too early) is refused by name.
  auto look_up = [this, &from](uint64_t id) -> absl::StatusOr<detail::ObjectHeader*> {
    if (ObjectEntry* live = store_->Lookup(id)) return live;
    return absl::NotFoundError(absl::StrCat("object ", id, ", named by its arguments, is not held by the driver (freed, "
                                            "or made by worker pid ", from.pid(), " and not sent to it)"));
  };
  for (size_t i = 0; i < m.deps.size(); ++i) {
    if (auto value = dep_values.find(i); value != dep_values.end()) {
      // A value the worker made: the task's input (its arguments name it by place, not id).
      args.deps.push_back(store_->CreateReady(std::make_unique<detail::EncodedValue>(std::move(*value->second))));
      continue;
    }
    absl::StatusOr<detail::ObjectHeader*> dep = look_up(m.deps[i]);
    if (!dep.ok()) return dep.status();
    args.deps.push_back(*dep);
  }
  for (size_t i = 0; i < m.nested.size(); ++i) {
    const uint64_t id = m.nested[i];
    if (auto value = nested_values.find(i); value != nested_values.end()) {
      // A value the worker made, named by id inside the arguments: a copy here under that id,
      // which the worker that runs the task imports. One this driver holds already is used; if
      // its value is still the worker's to send, this is it (so it outlives the worker).
      ObjectEntry* live = store_->Lookup(id);
      if (live != nullptr && live->state.load(std::memory_order_acquire) == detail::kObjectPending) {
        (void)remote_objects_->SettleFrom(live, from, *value->second);
      }
      if (live == nullptr) {
        if (!wire::IsWorkerObjectId(id)) return absl::DataLossError(absl::StrCat("object ", id, " is not a worker's"));
        live = store_->CreateReadyWithId(id, std::make_unique<detail::EncodedValue>(std::move(*value->second)));
      }
      args.nested.push_back(live);
      continue;
    }
    absl::StatusOr<detail::ObjectHeader*> ref = look_up(id);
    if (!ref.ok()) return ref.status();
    args.nested.push_back(*ref);
  }
  for (uint64_t id : m.inline_refs) {  // named inside those values: kept alive with the task
    absl::StatusOr<detail::ObjectHeader*> ref = look_up(id);
    if (!ref.ok()) return ref.status();
    args.nested.push_back(*ref);
  }
  std::move(let_go).Cancel();
  // Submitted as this driver's own task: placed, counted, retried and checkpointed as any. What
  // Submit refuses (bad options) is the worker's to hear, not this reader thread's to throw.
  try {
    return static_cast<ObjectEntry*>(Submit(function, std::move(args), &options));
  } catch (const Error& e) {
    return absl::Status(static_cast<absl::StatusCode>(e.code()), e.what());
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

void JobRuntime::Cancel(detail::ObjectHeader* object) {
  auto* entry = static_cast<ObjectEntry*>(object);
  Task* producer;
  {
    MutexLock lock(&entry->mu);
    producer = entry->producer;
    if (producer == nullptr) return;  // resolved, or a Put value
    producer->cancelled.store(true);
  }
  // Fail the result now; whoever runs or dequeues the task later drops it. Waiters see kCancelled
  // at once, and tasks depending on it fail.
  std::vector<Task*> waiting = store_->Fail(
      entry, MakeTaskError(ErrorCode::kCancelled, "?", 0, 0, "-", "cancelled"));
  for (Task* t : waiting) executor_->DependencyResolved(t, entry);
}

detail::ObjectHeader* JobRuntime::Put(std::unique_ptr<detail::ValueBox> value) {
  return store_->CreateReady(std::move(value));
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
  shapes_->AddStats(teams, stats.queued_tasks);
  stats.waiting_for_dependencies =
      static_cast<uint64_t>(std::max<int64_t>(0, executor_->waiting_for_dependencies()));
  stats.overdue = checkpoints_->OverdueTasks();
  for (auto& [team, u] : teams) {
    u.team = team;
    stats.teams.push_back(u);
  }
  stats.scrubbed_bytes += gpus_->scrubbed_bytes();
  stats.live_objects = store_->live_objects();
  if (remote_objects_ != nullptr) {
    stats.objects_kept_by_workers = remote_objects_->held();
    stats.bytes_fetched_from_workers = remote_objects_->bytes_fetched();
    stats.bytes_fetched_by_workers = bytes_fetched_by_workers_.load(std::memory_order_relaxed);
    stats.objects_fetched_over_ucx = remote_objects_->fetched_over_ucx();
    stats.objects_rebuilt = remote_objects_->rebuilt();
  }
  return stats;
}

}  // namespace gpupool::runtime
