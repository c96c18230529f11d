// File: runtime/tasks/worker_host.cc
#include "runtime/tasks/worker_host.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/internal/task_options_codec.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/tasks/function_registry.h"
#include "runtime/tasks/own_process.h"
#include "transport/fetch_wire.h"

namespace gpupool::runtime {

namespace {

// Marks the calling thread as encoding for `host`'s driver until it goes out of scope, and
// keeps the holds made meanwhile: an encoding that fails sends nothing, so they go back.
class EncodingFor {
 public:
  explicit EncodingFor(WorkerHost* host) : host_(host), previous_(current) { current = this; }
  ~EncodingFor() {
    current = previous_;
    for (detail::ObjectHeader* h : kept) detail::Release(h);  // what the caller did not take
  }
  static thread_local EncodingFor* current;
  WorkerHost* host() const { return host_; }
  std::vector<uint64_t> holds;                // ids of this worker's objects held for the driver
  std::vector<detail::ObjectHeader*> kept;    // the driver's objects met: retained until sent

 private:
  WorkerHost* const host_;
  EncodingFor* const previous_;
};
thread_local EncodingFor* EncodingFor::current = nullptr;

}  // namespace

WorkerHost* WorkerHost::EncodingForDriver() {
  return EncodingFor::current != nullptr ? EncodingFor::current->host() : nullptr;
}
namespace {

// Outcomes per frame, and how long a finished outcome may wait for company before it is sent.
constexpr size_t kOutcomesPerFrame = 1024;
constexpr auto kOutcomeDelay = std::chrono::milliseconds(2);

}  // namespace

absl::Status DriverLink::Request(pool::LeaseRequest request, LeaseListener* listener) {
  (void)request;
  (void)listener;
  return absl::UnimplementedError(
      "a task running in a worker process cannot ask the pool for GPU leases yet: submit GPU tasks from the "
      "driver (CPU tasks submitted here run in this worker)");
}
absl::Status DriverLink::Withdraw(const std::string& request_id) {
  return absl::NotFoundError(absl::StrCat("no request ", request_id));
}
absl::Status DriverLink::Release(const std::string& lease_id) {
  return absl::NotFoundError(absl::StrCat("no lease ", lease_id));
}
void DriverLink::Checkpointed(const std::string& lease_id, const CheckpointNote& note) {
  (void)driver_->Send(wire::Encode(
      wire::Checkpointed{.lease_id = lease_id, .task_key = note.task_key, .version = note.version, .step = note.step,
                         .path = note.path}));
}
double DriverLink::Now() const {
  std::chrono::duration<double> since = std::chrono::steady_clock::now() - since_;
  return base_s_ + since.count() * clock_speed_;
}

WorkerHost::WorkerHost(JobRuntime& runtime, FrameSocket& driver, std::chrono::milliseconds linger,
                       const std::string& objects_key, bool loopback)
    : rt_(runtime),
      driver_(driver),
      linger_(linger),
      worker_name_(absl::StrCat(" (worker pid ", getpid(), ")")),
      objects_key_(objects_key),
      loopback_(loopback),
      imports_(std::make_shared<DriverImports>(&runtime.store(), &driver, [&runtime](Task* t, ObjectEntry* entry) {
        runtime.executor().DependencyResolved(t, entry);
      })),
      inputs_(std::make_unique<TaskInputs>(
          &runtime.store(), &driver, [this](uint64_t id) { return KeptResult(id); },
          [this] { return FetchingOverUcx(); })),
      submits_(&driver) {
  imports_->UseKeepers([this](uint64_t id) { return KeptResult(id); },
                       [this](const wire::InputAt& at, absl::AnyInvocable<void(absl::StatusOr<std::string>)> done) {
                         inputs_->FromKeeper(at, std::move(done));
                       });
  rt_.store().SetRemoteValues(imports_);
}

transport::UcxWorker* WorkerHost::UcxLocked() {
  if (ucx_tried_) return ucx_.get();
  ucx_tried_ = true;  // once: a worker that cannot start UCX uses its connection
  if (objects_key_.empty() || objects_key_.size() > transport::kMaxAccessKeyBytes) return nullptr;
  // Peer failure is detected, so on one host UCX uses tcp loopback.
  absl::StatusOr<std::unique_ptr<transport::UcxWorker>> ucx = transport::UcxWorker::Create(
      transport::UcxOptions{.net_devices = loopback_ ? "lo" : "", .name = absl::StrCat("worker pid ", getpid())});
  if (ucx.ok()) ucx_ = *std::move(ucx);
  return ucx_.get();
}

bool WorkerHost::ServingOverUcx() {
  MutexLock lock(&ucx_mu_);
  if (server_tried_) return ucx_server_ != nullptr;
  server_tried_ = true;  // once: a worker that cannot serve over UCX serves over its connection
  transport::UcxWorker* ucx = UcxLocked();
  if (ucx == nullptr) return false;
  absl::StatusOr<std::unique_ptr<transport::ObjectServer>> server =
      transport::ObjectServer::Start(*ucx, registry_.AsLookup(), objects_key_);
  if (!server.ok()) return false;
  ucx_server_ = *std::move(server);
  // Before the outcome that names the first kept result: the driver knows where to fetch it.
  (void)driver_.Send(wire::Encode(wire::ObjectsAt{.ucx_address = ucx_->address()}));
  return true;
}

TaskInputs::Ucx WorkerHost::FetchingOverUcx() {
  MutexLock lock(&ucx_mu_);
  if (!fetcher_tried_) {
    fetcher_tried_ = true;  // once: a worker that cannot fetch over UCX asks its driver
    if (transport::UcxWorker* ucx = UcxLocked()) {
      absl::StatusOr<std::unique_ptr<transport::ObjectFetcher>> fetcher = transport::ObjectFetcher::Create(*ucx, objects_key_);
      if (fetcher.ok()) ucx_fetcher_ = *std::move(fetcher);
    }
  }
  if (ucx_fetcher_ == nullptr) return {};
  return {ucx_.get(), ucx_fetcher_.get()};
}

detail::ObjectHeader* WorkerHost::KeptResult(uint64_t id) {
  MutexLock lock(&held_mu_);
  auto it = held_.find(id);
  // Only a kept result (its bytes): an object a task put is typed.
  if (it == held_.end() || it->second.object->state.load(std::memory_order_acquire) != detail::kObjectReady ||
      !it->second.result) {
    return nullptr;
  }
  detail::Retain(it->second.object);
  return it->second.object;
}

detail::ObjectHeader* WorkerHost::Import(uint64_t object, detail::BoxDecoder decode) {
  return imports_->Import(object, decode);
}

void WorkerHost::KeepUntilSent(detail::ObjectHeader* object) {
  if (EncodingFor::current == nullptr || EncodingFor::current->host() != this) return;
  detail::Retain(object);
  EncodingFor::current->kept.push_back(object);
}

WorkerHost::~WorkerHost() {
  StopAll();
  rt_.store().SetRemoteValues(nullptr);  // the store may outlive this host: it asks nothing more of it
  for (auto& [ask, h] : deferred_) detail::Release(h);
  deferred_.clear();  // (StopAll stopped the inputs' fetches: none waits on the UCX reset below)
  {
    MutexLock lock(&ucx_mu_);
    ucx_server_.reset();  // no transfer reads a kept result past here
    ucx_fetcher_.reset();
  }
  MutexLock lock(&held_mu_);
  for (auto& [id, held] : held_) {
    if (held.served) (void)registry_.Remove(std::to_string(id));
    detail::Release(held.object);
    for (detail::ObjectHeader* h : held.kept) detail::Release(h);
  }
  held_.clear();
}

void WorkerHost::HoldForDriver(detail::ObjectHeader* object) {
  {
    MutexLock lock(&held_mu_);
    auto [it, first] = held_.try_emplace(object->id, Held{.object = object});
    if (first) detail::Retain(object);
    ++it->second.holds;
  }
  if (EncodingFor::current != nullptr && EncodingFor::current->host() == this) {
    EncodingFor::current->holds.push_back(object->id);
  }
}

void WorkerHost::DropHolds(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) OnRelease(wire::Release{.object = id, .count = 1});
}

bool WorkerHost::HoldsAnything() {
  MutexLock lock(&held_mu_);
  return !held_.empty();
}

void WorkerHost::OnRelease(const wire::Release& release) {
  Held gone;
  {
    MutexLock lock(&held_mu_);
    auto it = held_.find(release.object);
    if (it == held_.end()) return;
    if (release.read) it->second.read = true;  // the driver has the refs inside
    it->second.refs_read = std::max(it->second.refs_read, release.refs_read);
    if (release.count < it->second.holds) {
      it->second.holds -= release.count;
      return;
    }
    gone = std::move(it->second);
    held_.erase(it);
  }
  // Outside the lock: freeing may release what the value holds, and come back here.
  const bool served = gone.served;
  auto let_go = [this, gone = std::move(gone)]() mutable {
    if (!gone.read && gone.refs_read < gone.nested.size()) {  // the refs inside the driver never read
      DropHolds(std::vector<uint64_t>(gone.nested.begin() + static_cast<ptrdiff_t>(gone.refs_read), gone.nested.end()));
    }
    for (detail::ObjectHeader* h : gone.kept) detail::Release(h);
    detail::Release(gone.object);
  };
  // Another worker may be reading it over UCX (a task's input): the bytes go once it is done,
  // without this thread (which reads the driver's frames) waiting for it.
  if (served) {
    (void)registry_.RemoveThen(std::to_string(release.object), std::move(let_go));
  } else {
    let_go();
  }
}

void WorkerHost::OnDriverFetch(const wire::Fetch& ask) {
  detail::ObjectHeader* object = nullptr;
  {
    MutexLock lock(&held_mu_);
    if (auto it = held_.find(ask.object); it != held_.end()) {
      object = it->second.object;
      detail::Retain(object);
    }
  }
  if (object == nullptr) {
    (void)driver_.Send(wire::Encode(wire::Fetched{
        .request = ask.request,
        .code = static_cast<int64_t>(ErrorCode::kNotFound),
        .message = absl::StrCat("worker pid ", getpid(), " keeps no object ", ask.object, " for its driver")}));
    return;
  }
  if (object->state.load(std::memory_order_acquire) == detail::kObjectPending) {
    rt_.store().Want(static_cast<ObjectEntry*>(object));  // a copy of the driver's: fetched meanwhile
    deferred_.emplace_back(ask, object);  // a task here still computes it: answered when it is done
    return;
  }
  (void)driver_.Send(Answer(ask.request, object));
  detail::Release(object);
}

std::string WorkerHost::Answer(uint64_t request, detail::ObjectHeader* object) {
  EncodingFor scope(this);  // refs inside it go to the driver: held for it here
  bool sent_value = false;
  std::string frame = wire::AnswerFetch(request, object, &sent_value);
  if (!sent_value) DropHolds(scope.holds);
  return frame;
}

void WorkerHost::AnswerDeferred() {
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (it->second->state.load(std::memory_order_acquire) == detail::kObjectPending) {
      ++it;
      continue;
    }
    (void)driver_.Send(Answer(it->first.request, it->second));
    detail::Release(it->second);
    it = deferred_.erase(it);
  }
}

absl::Status WorkerHost::Serve() {
  auto idle_since = std::chrono::steady_clock::now();
  while (true) {
    absl::StatusOr<std::string> frame =
        driver_.Receive(deferred_.empty() ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2));
    AnswerDeferred();
    if (!frame.ok() && frame.status().code() == absl::StatusCode::kDeadlineExceeded) {
      ReapFinished();
      if (leases_.empty()) imports_->DropIdle();  // no task will read them soon: the borrows go
      // What it keeps for the driver would be lost with it: it stays while it keeps anything.
      if (!leases_.empty() || HoldsAnything()) {
        idle_since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - idle_since >= linger_) {
        // Bye first: the driver sends nothing new once it has it, and hands back (unrun) what it
        // sent meanwhile.
        (void)driver_.Send(wire::EncodeBye());
        StopImports();  // no lease, but a CPU task may still wait on one
        return absl::OkStatus();
      }
      continue;
    }
    if (!frame.ok()) {
      if (on_driver_lost_) on_driver_lost_();
      StopAll();
      return frame.status();
    }
    absl::StatusOr<wire::Kind> kind = wire::KindOf(*frame);
    absl::Status bad = kind.status();
    // The frame as its message, handed to `handle`; why not, when it does not decode.
    auto deliver = [](auto decoded, const auto& handle) -> absl::Status {
      if (decoded.ok()) handle(*std::move(decoded));
      return decoded.status();
    };
    if (kind.ok()) {
      switch (*kind) {
        case wire::Kind::kTasks:
          bad = deliver(wire::DecodeTasks(*frame), [&](wire::Tasks&& m) { OnTasks(std::move(m)); });
          break;
        case wire::Kind::kStopLease:
          bad = deliver(wire::DecodeStopLease(*frame), [&](const wire::StopLease& m) { OnStopLease(m); });
          break;
        case wire::Kind::kFetched:
          bad = deliver(wire::DecodeFetchedView(*frame), [&](const wire::FetchedView& m) {
            if (!inputs_->OnFetched(m)) imports_->OnFetched(m);
          });
          break;
        case wire::Kind::kFetch:
          bad = deliver(wire::DecodeFetch(*frame), [&](const wire::Fetch& m) { OnDriverFetch(m); });
          break;
        case wire::Kind::kFetchFrom:
          bad = deliver(wire::DecodeFetchFrom(*frame), [&](const wire::FetchFrom& m) { imports_->OnFetchFrom(m); });
          break;
        case wire::Kind::kRelease:
          bad = deliver(wire::DecodeRelease(*frame), [&](const wire::Release& m) { OnRelease(m); });
          break;
        case wire::Kind::kSubmitted:
          bad = deliver(wire::DecodeSubmitted(*frame), [&](const wire::Submitted& m) { submits_.OnSubmitted(m); });
          break;
        case wire::Kind::kStop:
          StopAll();
          return absl::OkStatus();
        default:
          bad = absl::DataLossError(absl::StrCat("the driver sent message kind ", static_cast<int>(*kind)));
      }
    }
    if (!bad.ok()) {
      StopAll();
      return bad;
    }
    idle_since = std::chrono::steady_clock::now();
  }
}

void WorkerHost::OnTasks(wire::Tasks&& message) {
  auto it = leases_.find(message.lease_id);
  if (it == leases_.end()) {
    absl::StatusOr<pool::Lease> lease = rpc::LeaseFromBytes(message.lease);
    std::vector<wire::Outcome> refused;
    if (!lease.ok()) {
      // Without its lease nothing can run: every task goes back as failed, naming why.
      for (wire::TaskToRun& t : message.tasks) {
        refused.push_back(wire::Outcome{.id = t.id, .kind = static_cast<uint64_t>(RunOutcome::Kind::kFailed),
                                        .code = static_cast<int64_t>(ErrorCode::kDataLoss),
                                        .message = absl::StrCat("the worker could not read lease ", message.lease_id,
                                                                ": ", lease.status().message())});
      }
      Send(refused);
      return;
    }
    auto l = std::make_unique<Lease>();
    l->run.lease = *std::move(lease);
    rt_.gpus().Describe(l->run.lease, l->run);
    l->run.location += worker_name_;
    Lease* raw = l.get();
    it = leases_.emplace(message.lease_id, std::move(l)).first;
    raw->thread = std::thread([this, raw] { LeaseLoop(raw); });
  }
  Lease& lease = *it->second;
  std::vector<wire::Outcome> refused;
  std::vector<Task*> tasks;
  tasks.reserve(message.tasks.size());
  for (wire::TaskToRun& t : message.tasks) {
    wire::Outcome refusal;
    if (Task* task = MakeTask(std::move(t), refusal)) {
      tasks.push_back(task);
    } else {
      refusal.location = lease.run.location;
      refused.push_back(std::move(refusal));
    }
  }
  {
    MutexLock lock(&lease.mu);
    for (Task* t : tasks) lease.queue.push_back(t);
  }
  lease.cv.NotifyAll();
  if (!refused.empty()) Send(refused);
}

Task* WorkerHost::MakeTask(wire::TaskToRun&& t, wire::Outcome& refusal) {
  refusal.id = t.id;
  refusal.kind = static_cast<uint64_t>(RunOutcome::Kind::kFailed);
  const detail::FunctionInfo* function = detail::FunctionNamed(t.function);
  if (function == nullptr) {
    refusal.code = static_cast<int64_t>(ErrorCode::kNotFound);
    refusal.message = absl::StrCat("the worker's program ", OwnExecutable(), " has no remote function '", t.function,
                                   "' (the worker runs the driver's executable, or --gpupool-worker-binary: register "
                                   "the function there with GPUPOOL_REMOTE)");
    return nullptr;
  }
  // A lease's tasks share their options: decoded and interned once, not per task.
  // Keyed by the options and the forced interval the driver sent with them (a class's interval
  // may change while the options stay the same).
  const std::string shape_key = absl::StrCat(t.options, "#", t.checkpoint_interval_s);
  auto shape = shapes_.find(shape_key);
  if (shape == shapes_.end()) {
    TaskOptions options;
    try {
      Reader r(t.options);
      options = gpupool::Decode<TaskOptions>(r);
    } catch (const Error& e) {
      refusal.code = static_cast<int64_t>(ErrorCode::kDataLoss);
      refusal.message = absl::StrCat("the task's options arrived unreadable: ", e.what());
      return nullptr;
    }
    TaskShape* interned = rt_.shapes().ShapeFor(&options);
    // The driver knows the priority class's forced interval; this worker's pool client has no
    // configuration. Set before any task of the shape runs.
    interned->checkpoint_interval_s = t.checkpoint_interval_s;
    shape = shapes_.emplace(shape_key, interned).first;
  }
  auto task = std::make_unique<Task>();
  task->id = t.id;
  task->function = function;
  task->shape = shape->second;
  task->args = std::move(t.args);
  // Inputs the driver did not send are got from where they are (TaskInputs).
  std::vector<detail::ObjectHeader*> elsewhere(t.inputs.size(), nullptr);
  for (const wire::InputAt& at : t.inputs_at) {
    if (at.index < elsewhere.size() && elsewhere[at.index] == nullptr) elsewhere[at.index] = inputs_->Input(at);
  }
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    task->deps.push_back(elsewhere[i] != nullptr ? elsewhere[i]
                                                 : rt_.Put(std::make_unique<detail::EncodedValue>(std::move(t.inputs[i]))));
  }
  task->attempt = static_cast<int>(t.attempt);
  task->checkpoint_key = std::make_unique<std::string>(std::move(t.checkpoint_key));
  task->resume_from = std::move(t.resume_from);
  return task.release();
}

void WorkerHost::DropTask(Task* task) {
  for (detail::ObjectHeader* h : task->deps) detail::Release(h);
  delete task;
}

wire::Outcome WorkerHost::Report(Task* task, LeaseRun& run, RunOutcome&& o, std::vector<detail::ObjectHeader*>& kept) {
  wire::Outcome out{.id = task->id,
                    .kind = static_cast<uint64_t>(o.kind),
                    .code = static_cast<int64_t>(o.code),
                    .message = std::move(o.message),
                    .cause = std::move(o.cause),
                    .location = o.location.empty() ? run.location : std::move(o.location),
                    .busy_gpu_micros = o.busy_gpu_micros,
                    .lost_gpu_micros = o.lost_gpu_micros,
                    .system_failure = o.system_failure,
                    .resume_note = std::move(o.resume_note)};
  if (o.kind == RunOutcome::Kind::kDone) {
    bool encoded = true;
    auto fail = [&](ErrorCode code, const char* what) {
      encoded = false;
      out.kind = static_cast<uint64_t>(RunOutcome::Kind::kFailed);
      out.code = static_cast<int64_t>(code);
      out.message = absl::StrCat("its result cannot be sent from the worker to the driver: ", what);
      out.value.clear();  // a part-encoded value is not sent
    };
    // Refs in it leave for the driver (ExportObject), however the encoding ends.
    EncodingFor scope(this);
    try {
      o.value->EncodeTo(out.value);
    } catch (const Error& e) {
      fail(e.code(), e.what());
    } catch (const std::exception& e) {  // a user's codec: the task fails, the worker lives on
      fail(ErrorCode::kInternal, e.what());
    }
    if (!encoded) DropHolds(scope.holds);  // nothing goes: the holds made meanwhile go back
    if (encoded && out.value.size() > wire::kInlineResultBytes) {
      // Too big to go with its outcome: kept here, as its bytes, until the driver fetches it or
      // drops it. The refs inside were held for the driver as they were encoded, once: those
      // holds, and the driver's objects met (this worker's copies, so their borrows), stay with it.
      const bool own_refs = !scope.holds.empty();  // refs to objects this worker made
      auto bytes = std::make_unique<detail::EncodedValue>(std::move(out.value));
      const std::string& served = bytes->bytes;  // stable: the box is never changed
      detail::ObjectHeader* held = rt_.store().CreateReady(std::move(bytes));
      const bool over_ucx =
          ServingOverUcx() &&
          registry_.Add(std::to_string(held->id), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(served.data()),
                                                                      served.size())).ok();
      {
        MutexLock lock(&held_mu_);
        held_.emplace(held->id, Held{.object = held, .holds = 1, .nested = std::move(scope.holds),
                                     .kept = std::move(scope.kept), .served = over_ucx, .result = true});
      }
      scope.holds.clear();
      scope.kept.clear();
      out.held = held->id;
      out.held_own_refs = own_refs;
      out.held_bytes = served.size();
      out.value.clear();
    }
    kept.insert(kept.end(), scope.kept.begin(), scope.kept.end());  // released once the outcome went
    scope.kept.clear();
  }
  // Done for good (not stopped): its snapshots here are no longer needed.
  if ((o.kind == RunOutcome::Kind::kDone || o.kind == RunOutcome::Kind::kFailed) && task->checkpoint_key != nullptr &&
      !task->checkpoint_key->empty()) {
    rt_.checkpoints().Forget(*task->checkpoint_key);
  }
  return out;
}

void WorkerHost::LeaseLoop(Lease* lease) {
  std::vector<wire::Outcome> out;
  std::vector<detail::ObjectHeader*> kept;  // the driver's objects in `out`: let go once it is sent
  auto send = [&] {
    Send(out);
    for (detail::ObjectHeader* h : kept) detail::Release(h);
    kept.clear();
  };
  auto first_waiting = std::chrono::steady_clock::now();
  while (true) {
    Task* task = nullptr;
    bool more;
    {
      MutexLock lock(&lease->mu);
      if (lease->queue.empty() && !out.empty()) {
        lock.Unlock();
        send();
        lock.Lock();
      }
      while (lease->queue.empty() && !lease->done && !lease->run.stop.load()) lease->cv.Wait(&lease->mu);
      if (lease->queue.empty()) break;
      task = lease->queue.front();
      lease->queue.pop_front();
      more = !lease->queue.empty();
    }
    if (out.empty()) first_waiting = std::chrono::steady_clock::now();
    // Its inputs may still be on their way (Executor::AwaitInputs): what finished before it goes
    // to the driver now, not after the wait.
    if (!out.empty() && std::any_of(task->deps.begin(), task->deps.end(), [](detail::ObjectHeader* h) {
          return h->state.load(std::memory_order_acquire) == detail::kObjectPending;
        })) {
      send();
    }
    RunOutcome outcome;
    if (lease->run.stop.load()) {
      outcome.kind = RunOutcome::Kind::kNotRun;  // its lease went before it started
    } else {
      outcome = rt_.executor().Run(task, &lease->run);
    }
    out.push_back(Report(task, lease->run, std::move(outcome), kept));
    DropTask(task);
    if (!more || out.size() >= kOutcomesPerFrame || std::chrono::steady_clock::now() - first_waiting >= kOutcomeDelay) {
      send();
    }
  }
  send();
  rt_.EndDeviceUse(lease->run);
  lease->finished.store(true);
}

void WorkerHost::Send(std::vector<wire::Outcome>& outcomes) {
  if (outcomes.empty()) return;
  for (const std::string& frame : wire::EncodeOutcomeFrames(outcomes, wire::kMaxWorkerFrameBytes)) {
    (void)driver_.Send(frame);
  }
  outcomes.clear();
}

void WorkerHost::OnStopLease(const wire::StopLease& stop) {
  auto it = leases_.find(stop.lease_id);
  if (it == leases_.end()) return;
  Lease& lease = *it->second;
  {
    MutexLock lock(&lease.mu);
    if (stop.why == wire::StopLease::Why::kDone) {
      lease.done = true;
    } else if (stop.why == wire::StopLease::Why::kShutdown) {
      lease.run.stop.store(true);
    } else {
      lease.run.revoke_deadline_s.store(stop.deadline_s);
      (stop.why == wire::StopLease::Why::kLost ? lease.run.lost : lease.run.revoked).store(true);
      lease.run.stop.store(true);
    }
  }
  lease.cv.NotifyAll();
}

void WorkerHost::ReapFinished() {
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second->finished.load()) {
      it->second->thread.join();
      it->second->run.ReleaseStreams();
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkerHost::StopImports() {
  imports_->Stop(absl::CancelledError("the worker is stopping"));
  inputs_->Stop(absl::CancelledError("the worker is stopping"));
  submits_.Stop(absl::CancelledError("the worker is stopping: no answer came from its driver"));
}

detail::ObjectHeader* WorkerHost::SubmitToDriver(const detail::FunctionInfo* function, detail::EncodedArgs args,
                                                 const TaskOptions& options, bool (*made_here)(ObjectId)) {
  // The refs the arguments hold stay held until the driver has its own (it answered).
  absl::Cleanup let_go = [&args] { detail::ReleaseRefs(args); };
  // Named in errors as the task is named (a Python function's own name, not the runtime's entry point).
  const std::string& name = options.name.empty() ? function->name : options.name;
  wire::Submit message{.function = function->name, .args = std::move(args.bytes)};
  {
    Writer w(message.options);
    gpupool::Encode(w, options);
  }
  std::vector<detail::ObjectHeader*> kept;  // the driver's objects met in values sent: kept until sent
  absl::Cleanup let_go_kept = [&kept] {
    for (detail::ObjectHeader* h : kept) detail::Release(h);
  };
  // An object made here (a Put, a CPU task's result) goes as its value, waited for: a failed one
  // fails the submission, as its dependency failing would fail the task.
  auto value_of = [&](detail::ObjectHeader* h, const std::string& what) {
    const detail::ValueBox& value = detail::AwaitValue(h, std::chrono::steady_clock::time_point::max());
    std::string bytes;
    EncodingFor scope(this);
    try {
      value.EncodeTo(bytes);
    } catch (...) {  // a user's codec: the holds made so far go back
      DropHolds(scope.holds);
      throw;
    }
    // The driver's objects named inside: the driver keeps them with the task (they go by id).
    for (detail::ObjectHeader* named : scope.kept) message.inline_refs.push_back(named->id);
    kept.insert(kept.end(), scope.kept.begin(), scope.kept.end());
    scope.kept.clear();
    if (!scope.holds.empty()) {
      DropHolds(scope.holds);
      throw Error(ErrorCode::kUnimplemented,
                  absl::StrCat(what, " of GPU task '", name, "', a value this worker made, holds refs to other "
                               "objects it made: a GPU task submitted from a worker's task cannot take those yet (pass "
                               "their values, or refs the driver made)"));
    }
    return bytes;
  };
  for (size_t i = 0; i < args.deps.size(); ++i) {
    detail::ObjectHeader* h = args.deps[i];
    message.deps.push_back(h->id);
    if (made_here(h->id)) {
      message.inline_deps.push_back(i);
      message.inline_dep_values.push_back(value_of(h, absl::StrCat("argument ", i)));
    }
  }
  for (size_t i = 0; i < args.nested.size(); ++i) {
    detail::ObjectHeader* h = args.nested[i];
    message.nested.push_back(h->id);
    if (made_here(h->id)) {
      message.inline_nested.push_back(i);
      message.inline_nested_values.push_back(value_of(h, absl::StrCat("object ", h->id, " inside its arguments")));
    }
  }
  if (const size_t bytes = wire::WireBytes(message); bytes > wire::kMaxTaskWireBytes) {
    throw Error(ErrorCode::kResourceExhausted,
                absl::StrCat("GPU task '", name, "' with its arguments is ", bytes, " bytes, over the ",
                             wire::kMaxTaskWireBytes, " a worker may send its driver: pass big values as refs"));
  }
  absl::StatusOr<uint64_t> result = submits_.Submit(std::move(message));
  if (!result.ok()) {
    throw Error(static_cast<ErrorCode>(result.status().code()),
                absl::StrCat("GPU task '", name, "' submitted from a task in worker pid ", getpid(), ": ",
                             result.status().message()));
  }
  // The driver lent it to this worker: the import's borrow takes the loan over.
  return Import(*result, function->decode_result);
}

void WorkerHost::StopAll() {
  for (auto& [id, lease] : leases_) {
    {
      MutexLock lock(&lease->mu);
      lease->run.lost.store(true);
      lease->run.stop.store(true);
    }
    lease->cv.NotifyAll();
  }
  // After the leases' stop: a task waiting for an input the stop fails is handed back unrun, not
  // failed (Executor::AwaitInputs); and a task waiting on an import would hold up the stop.
  StopImports();
  for (auto& [id, lease] : leases_) {
    if (lease->thread.joinable()) lease->thread.join();
    lease->run.ReleaseStreams();
  }
  leases_.clear();
}

}  // namespace gpupool::runtime
