// File: runtime/tasks/remote_leases.cc
#include "runtime/tasks/remote_leases.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/internal/task_options_codec.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/tasks/shape_queue.h"

namespace gpupool::runtime {
namespace {

// Tasks one lease keeps at its worker at once, and sends per frame: enough to hide the round
// trip behind short tasks (a frame costs a system call each way), few enough that a revoked
// lease hands back little unrun work.
constexpr int kWindow = 4096;
constexpr size_t kBatch = 1024;
// A lease sends tasks ahead of its running one only while its shape's queue holds at least this
// many, and takes a 1/kPipelineBacklog share of the queue per frame.
constexpr size_t kPipelineBacklog = 32;

}  // namespace

RemoteLeases::RemoteLeases(Deps deps)
    : executor_(*deps.executor),
      events_(*deps.events),
      job_id_(std::move(deps.job_id)),
      lease_linger_ms_(deps.lease_linger_ms),
      stopping_(deps.stopping) {}

bool RemoteLeases::Describe(Task* task, const std::string& options, const WorkerConnection& to, wire::TaskToRun& out) {
  out.id = task->id;
  out.function = task->function->name;
  out.args = task->args;
  out.inputs.clear();
  out.inputs.reserve(task->deps.size());
  out.inputs_at.clear();
  try {
    for (detail::ObjectHeader* h : task->deps) {
      out.inputs.emplace_back();
      // Made before the task became runnable: resolved here, or a value a worker keeps, which
      // the task's worker gets from there itself (Executor::RunTasksInWorkers).
      if (h->state.load(std::memory_order_acquire) == detail::kObjectFailed) {
        // Failed since it was made (a worker that kept it died): as any failed dependency.
        std::string why, cause;
        DescribeDependencyFailure(static_cast<ObjectEntry*>(h)->failure, &why, &cause);
        executor_.FailTask(task, ErrorCode::kAborted, "submit", why, cause);
        return false;
      }
      if (h->state.load(std::memory_order_acquire) == detail::kObjectPending) {
        // Where it is; else the worker asks this driver, which fetches the value meanwhile.
        wire::InputAt at{.index = out.inputs.size() - 1, .object = h->id};
        if (objects_ != nullptr) (void)objects_->Locate(static_cast<ObjectEntry*>(h), to, &at);
        out.inputs_at.push_back(std::move(at));
        continue;
      }
      const detail::ValueBox& value = detail::AwaitValue(h, std::chrono::steady_clock::time_point::max());
      value.EncodeTo(out.inputs.back());
    }
  } catch (const Error& e) {
    executor_.FailTask(task, e.code(), "driver",
                       absl::StrCat("an input cannot be sent to the worker that would run it: ", e.what()));
    return false;
  }
  out.options = options;
  out.attempt = task->attempt;
  // The driver's key: every run of the task, on whichever worker, snapshots and resumes there.
  if (task->checkpoint_key == nullptr) task->checkpoint_key = std::make_unique<std::string>(CheckpointKey(job_id_, task->id));
  out.checkpoint_key = *task->checkpoint_key;
  out.resume_from = task->resume_from;
  out.checkpoint_interval_s = task->shape->checkpoint_interval_s;
  // With its lease, a task must fit one frame (a lease's bytes are small beside the margin).
  if (const size_t bytes = wire::WireBytes(out); bytes > wire::kMaxTaskWireBytes) {
    executor_.FailTask(task, ErrorCode::kResourceExhausted, "driver",
                       absl::StrCat("its arguments and inputs, ", bytes, " bytes, are over the ",
                                    wire::kMaxWorkerFrameBytes, " bytes a task may take to a worker on another node"));
    return false;
  }
  return true;
}

void RemoteLeases::RunLeaseTasks(LeaseRun* run) {
  ShapeQueue* q = run->shape->queue;
  const std::string node = run->lease.gpus.empty() ? "" : run->lease.gpus.front().node;
  absl::StatusOr<std::shared_ptr<WorkerConnection>> worker =
      workers_ != nullptr ? workers_->WorkerOn(node)
                          : absl::FailedPreconditionError("this process cannot start workers on other nodes");
  if (!worker.ok()) {
    // A worker that cannot start fails a task with the reason (never a silent wait); the lease
    // goes back, and the next task asks again.
    events_.Emit("worker-failed", run->lease.request.team, run->lease.id, std::string(worker.status().message()));
    Task* task = nullptr;
    if (q->PopBatch(&task, 1, std::chrono::steady_clock::now(), run->stop) == 1) {
      executor_.FailTask(task, static_cast<ErrorCode>(worker.status().code()), run->location,
                         std::string(worker.status().message()));
    }
    return;
  }
  LeaseState state{run, worker->get()};
  {
    MutexLock lock(&mu_);
    leases_.insert(&state);
    if (state.worker->leaving()) state.worker_gone = true;  // its reader may have ended already
  }
  std::string options;
  {
    Writer w(options);
    gpupool::Encode(w, run->shape->options);
  }
  const auto linger = std::chrono::milliseconds(lease_linger_ms_);
  std::vector<Task*> batch(kBatch);
  bool first = true;
  while (!run->stop.load()) {
    size_t want;
    {
      MutexLock lock(&mu_);
      // Sending ahead hides the round trip behind short tasks, but tasks sent to this lease are
      // out of reach of the shape's other leases: ahead of a running task, only a long backlog
      // is sent (long tasks then spread over every lease the shape gets, as local ones do).
      while (!state.worker_gone && !run->stop.load() && state.in_flight > 0 &&
             (state.in_flight >= kWindow || q->size() < kPipelineBacklog)) {
        cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
      }
      if (state.worker_gone || run->stop.load()) break;
      size_t backlog_share = std::max<size_t>(1, q->size() / kPipelineBacklog);
      want = std::min({kBatch, static_cast<size_t>(kWindow - state.in_flight), backlog_share});
    }
    size_t n = q->PopBatch(batch.data(), want, std::chrono::steady_clock::now() + linger, run->stop);
    if (n == 0) {
      MutexLock lock(&mu_);
      if (state.in_flight == 0 || state.worker_gone) break;  // idle for the linger: the lease goes back
      continue;
    }
    wire::Tasks message;
    message.lease_id = run->lease.id;
    if (first) message.lease = rpc::LeaseToBytes(run->lease);
    message.tasks.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      wire::TaskToRun t;
      if (Describe(batch[i], options, *state.worker, t)) message.tasks.push_back(std::move(t));
      else batch[i] = nullptr;
    }
    bool gone;
    {
      MutexLock lock(&mu_);
      gone = state.worker_gone || state.worker->leaving();
      if (!gone) {
        for (size_t i = 0; i < n; ++i) {
          if (batch[i] != nullptr) in_flight_[batch[i]->id] = InFlight{batch[i], &state};
        }
        state.in_flight += static_cast<int>(message.tasks.size());
      }
    }
    if (gone) {  // OnLost has run (or will find none of these): they go back to the queue unrun
      for (size_t i = 0; i < n; ++i) {
        if (batch[i] == nullptr) continue;
        RunOutcome unrun;
        unrun.kind = RunOutcome::Kind::kNotRun;
        executor_.Settle(batch[i], std::move(unrun));
      }
      break;
    }
    // A send that fails means the connection is going: its reader settles what was in flight.
    // Several frames when the batch is over a frame's limit (each task fits one: see Describe).
    bool sent = true;
    for (const std::string& frame : wire::EncodeTaskFrames(message, wire::kMaxWorkerFrameBytes)) {
      if (!(sent = state.worker->Send(frame).ok())) break;
    }
    if (!sent) break;
    first = false;
  }
  if (!first) {
    wire::StopLease stop{.lease_id = run->lease.id,
                         .why = run->lost.load()      ? wire::StopLease::Why::kLost
                                : run->revoked.load() ? wire::StopLease::Why::kRevoked
                                : run->stop.load()    ? wire::StopLease::Why::kShutdown
                                                      : wire::StopLease::Why::kDone,
                         .deadline_s = run->revoke_deadline_s.load()};
    (void)state.worker->Send(wire::Encode(stop));
  }
  Drain(state);
  MutexLock lock(&mu_);
  leases_.erase(&state);
}

void RemoteLeases::Drain(LeaseState& state) {
  bool told_lost = state.run->lost.load();
  // Once the job shuts down, its workers are told to stop and are stopped for good (their
  // process groups killed) after this returns: a task that reaches no safe point is not waited
  // for past this grace from then (a thread in this process would have to be, not a worker).
  std::optional<std::chrono::steady_clock::time_point> give_up_at;
  while (true) {
    if (!give_up_at.has_value() && stopping_ != nullptr && stopping_->load()) {
      give_up_at = std::chrono::steady_clock::now() + kShutdownGrace;
    }
    {
      MutexLock lock(&mu_);
      // Not on worker_gone alone: OnLost still settles (and counts down) what it took, using the state.
      if (state.in_flight == 0) return;
      cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
      if (state.in_flight == 0) return;
    }
    if (give_up_at.has_value() && std::chrono::steady_clock::now() >= *give_up_at) {
      Abandon(state);
      continue;  // counted down: returns at the top
    }
    if (!told_lost && state.run->lost.load()) {  // the revocation's deadline passed meanwhile
      told_lost = true;
      (void)state.worker->Send(wire::Encode(wire::StopLease{.lease_id = state.run->lease.id,
                                                            .why = wire::StopLease::Why::kLost}));
    }
  }
}

RunOutcome RemoteLeases::Outcome(Task* task, WorkerConnection& from, wire::Outcome&& o) {
  RunOutcome out;
  out.kind = o.kind <= static_cast<uint64_t>(RunOutcome::Kind::kNotRun) ? static_cast<RunOutcome::Kind>(o.kind)
                                                                        : RunOutcome::Kind::kFailed;
  out.code = static_cast<ErrorCode>(o.code);
  out.message = std::move(o.message);
  out.cause = std::move(o.cause);
  out.location = std::move(o.location);
  out.busy_gpu_micros = o.busy_gpu_micros;
  out.lost_gpu_micros = o.lost_gpu_micros;
  out.system_failure = o.system_failure;
  out.resume_note = std::move(o.resume_note);
  if (out.kind == RunOutcome::Kind::kDone && o.held != 0) {
    // The worker kept it: the result's entry stays pending, fetched from there when needed (not
    // for a task cancelled meanwhile: settled as cancelled, it lets the worker's copy go).
    const bool can_hold = !task->cancelled.load() && objects_ != nullptr && task->function->decode_result != nullptr;
    // (HoldResult gives the worker's copy back itself when the entry was resolved meanwhile.)
    out.value_elsewhere =
        can_hold && objects_->HoldResult(task->result, from, o.held, task->function->decode_result,
                                         absl::StrCat("the result of task '", task->name(), "' (id ", task->id, ")"),
                                         o.held_own_refs, o.held_bytes);
    if (!can_hold) from.PostFrame(wire::Encode(wire::Release{.object = o.held, .count = 1}));
    if (!out.value_elsewhere && !task->cancelled.load()) {
      out.kind = RunOutcome::Kind::kFailed;
      out.code = ErrorCode::kInternal;
      out.message = "its worker kept its result, and this driver cannot fetch it";
    }
  } else if (out.kind == RunOutcome::Kind::kDone) {
    try {
      if (task->function->decode_result == nullptr) throw Error(ErrorCode::kInternal, "no decoder for its result");
      RemoteObjects::DecodingFrom scope(&from);  // refs to the worker's objects are its holds
      Reader r(o.value);
      out.value = task->function->decode_result(r);
    } catch (const Error& e) {
      out.kind = RunOutcome::Kind::kFailed;
      out.code = ErrorCode::kDataLoss;
      out.message = absl::StrCat("its result came back from the worker unreadable: ", e.what());
    } catch (const std::exception& e) {  // a user's codec
      out.kind = RunOutcome::Kind::kFailed;
      out.code = ErrorCode::kDataLoss;
      out.message = absl::StrCat("its result came back from the worker unreadable: ", e.what());
    }
  }
  return out;
}

std::vector<RemoteLeases::InFlight> RemoteLeases::TakeInFlight(const std::function<bool(const InFlight&)>& which) {
  std::vector<InFlight> taken;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (which(it->second)) {
      taken.push_back(it->second);
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

void RemoteLeases::SettleInFlight(const InFlight& f, RunOutcome outcome) {
  executor_.Settle(f.task, std::move(outcome));
  MutexLock lock(&mu_);
  --f.lease->in_flight;
  cv_.NotifyAll();
}

void RemoteLeases::OnOutcomes(WorkerConnection& from, std::vector<wire::Outcome> outcomes) {
  for (wire::Outcome& o : outcomes) {
    InFlight f{};
    {
      MutexLock lock(&mu_);
      auto it = in_flight_.find(o.id);
      if (it == in_flight_.end() || it->second.lease->worker != &from) {  // not this worker's (any more)
        // A result it kept for a task settled already (abandoned at shutdown): let it go.
        if (o.held != 0) from.PostFrame(wire::Encode(wire::Release{.object = o.held, .count = 1}));
        continue;
      }
      f = it->second;
      in_flight_.erase(it);
    }
    RunOutcome outcome = Outcome(f.task, from, std::move(o));
    if (outcome.lease_id.empty()) outcome.lease_id = f.lease->run->lease.id;
    // Before in_flight drops: the lease thread releases (with this busy time) only once it is 0.
    f.lease->run->busy_gpu_micros.fetch_add(outcome.busy_gpu_micros, std::memory_order_relaxed);
    SettleInFlight(f, std::move(outcome));
  }
}

void RemoteLeases::Abandon(LeaseState& state) {
  std::vector<InFlight> abandoned;
  {
    MutexLock lock(&mu_);
    abandoned = TakeInFlight([&](const InFlight& f) { return f.lease == &state; });
  }
  for (const InFlight& f : abandoned) {
    RunOutcome outcome;
    outcome.lease_id = f.lease->run->lease.id;
    outcome.location = f.lease->run->location;
    outcome.kind = RunOutcome::Kind::kCancelled;
    outcome.message = "the job shut down while its worker ran it";
    SettleInFlight(f, std::move(outcome));  // its worker's late outcome finds nothing in flight
  }
}

void RemoteLeases::OnLost(WorkerConnection& gone, const absl::Status& why, bool bye) {
  std::vector<InFlight> lost;
  {
    MutexLock lock(&mu_);
    for (LeaseState* l : leases_) {
      if (l->worker == &gone) l->worker_gone = true;
    }
    lost = TakeInFlight([&](const InFlight& f) { return f.lease->worker == &gone; });
    cv_.NotifyAll();
  }
  if (!bye) events_.Emit("worker-lost", "", "", std::string(why.message()));
  for (const InFlight& f : lost) {
    RunOutcome outcome;
    outcome.lease_id = f.lease->run->lease.id;
    outcome.location = absl::StrCat(f.lease->run->location, " (worker pid ", gone.pid(), ")");
    if (bye) {
      outcome.kind = RunOutcome::Kind::kNotRun;  // it left before it took them: nothing ran
    } else {
      outcome.kind = RunOutcome::Kind::kStopped;
      outcome.system_failure = true;
      outcome.resume_note = absl::StrCat("its worker died (", why.message(), "); runs again");
    }
    SettleInFlight(f, std::move(outcome));
  }
}

}  // namespace gpupool::runtime
