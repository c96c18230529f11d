// File: runtime/tasks/lease_manager.cc
#include "runtime/tasks/lease_manager.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "runtime/tasks/shape_queue.h"

namespace gpupool::runtime {

LeaseManager::LeaseManager(Deps deps)
    : pool_(*deps.pool),
      gpus_(*deps.gpus),
      events_(*deps.events),
      stopping_(*deps.stopping),
      job_id_(std::move(deps.job_id)),
      max_leases_per_shape_(deps.max_leases_per_shape),
      run_tasks_(std::move(deps.run_tasks)),
      fail_task_(std::move(deps.fail_task)),
      worker_nodes_(std::move(deps.worker_nodes)) {}

// A request names at most this many preferred nodes (the head refuses longer lists: kMaxListEntries
// in runtime/rpc/lease_codec.h); a job with workers on more nodes prefers the first ones.
constexpr size_t kMaxPreferredNodes = 64;

void LeaseManager::MaybeRequestLeases(TaskShape* shape) {
  ShapeQueue* q = shape->queue;
  std::vector<pool::LeaseRequest> to_request;
  {
    MutexLock lock(&leases_mu_);
    if (stopping_.load() || !shape->refused.ok()) return;
    // Tasks beyond the lease threads waiting for one (a waiter takes the next task) need leases.
    // Counting every queued task, a driver that submits and waits one task at a time asked the
    // pool for a lease per task, each granted and lingering unused.
    const size_t queued = q->size();
    const size_t waiting = static_cast<size_t>(std::max(0, q->idle()));
    const size_t unserved = queued > waiting ? queued - waiting : 0;
    int target = static_cast<int>(std::min<size_t>(max_leases_per_shape_, unserved + q->leases_held));
    while (q->leases_held + q->leases_requested < target) {
      pool::LeaseRequest r = shape->request;
      r.id = absl::StrCat(job_id_, "/", shape->team, "/", reinterpret_cast<uintptr_t>(shape) % 100000,
                          "/", q->next_request++);
      pending_requests_[r.id] = shape;
      ++q->leases_requested;
      to_request.push_back(std::move(r));
    }
    // Under leases_mu_ (then the worker pool's own lock, never the other way round): the runtime
    // sets stopping_ and takes this lock in StopAll before it destroys the worker pool.
    if (!to_request.empty() && worker_nodes_) {
      const std::vector<std::string> nodes = worker_nodes_();
      for (pool::LeaseRequest& r : to_request) {
        if (r.required_labels.contains("node")) continue;  // pinned: nothing to prefer
        for (const std::string& n : nodes) {
          if (r.preferred_nodes.size() >= kMaxPreferredNodes) break;  // what the head takes
          if (std::find(r.preferred_nodes.begin(), r.preferred_nodes.end(), n) == r.preferred_nodes.end()) {
            r.preferred_nodes.push_back(n);
          }
        }
      }
    }
  }
  // A refusal comes back through OnRequestFailed, now or later.
  for (pool::LeaseRequest& r : to_request) pool_.Submit(std::move(r), this);
}

void LeaseManager::RefuseShape(TaskShape* shape, const absl::Status& why) {
  bool first;
  {
    MutexLock lock(&leases_mu_);
    first = shape->refused.ok();
    if (first) shape->refused = why;
  }
  // Several requests of the shape may be refused: the job hears of it once.
  if (first) events_.Emit("request-refused", shape->team, "", std::string(why.message()));
  for (Task* t : shape->queue->TakeAll()) {
    fail_task_(t, static_cast<ErrorCode>(why.code()), "submit",
               absl::StrCat("the pool refused its lease request: ", why.message()));
  }
}

void LeaseManager::OnGranted(const pool::Lease& lease) {
  // A grant may still arrive while the runtime shuts down (for a request StopAll withdrew,
  // granted before the withdrawal got there); JobRuntime resets the pool client only once no
  // grant is being handled here (WaitForGrants), and a grant that arrives once it is stopping is
  // left alone: the pool takes the lease back when the job's connection closes (or, embedded,
  // when it stops).
  granting_.fetch_add(1);
  absl::Cleanup handled = [this] { granting_.fetch_sub(1); };
  if (stopping_.load()) return;
  auto run = std::make_unique<LeaseRun>();
  run->lease = lease;
  gpus_.Describe(lease, *run);
  run->remote = !gpus_.Holds(lease);
  LeaseRun* raw = run.get();
  // Workers that have given their lease back, reaped here. They are joined only after
  // leases_mu_ is released: a finished worker may still be taking that lock (to ask for the next
  // lease of its shape), and joining it under the lock deadlocked the job. Once the runtime is
  // stopping, JoinWorkers joins every worker, so none is reaped here (a thread joined twice,
  // or freed under the shutdown's join, hung rank 0 of an mpirun job at exit).
  std::vector<std::unique_ptr<LeaseRun>> reaped;
  bool keep = Adopt(lease.request.id, run, reaped);
  for (auto& done : reaped) {
    if (done->thread.joinable()) done->thread.join();
  }
  reaped.clear();
  if (!keep) {
    (void)pool_.Release(lease.id);  // granted after we stopped wanting it
    return;
  }
  const pool::SlotShape& slot = lease.request.slot;
  events_.Emit("lease-granted", lease.request.team, lease.id,
               absl::StrCat(raw->location, " ", pool::SlotKindName(slot.kind),
                            slot.kind == pool::SlotKind::kFraction ? absl::StrCat(" ", raw->gpus) : "",
                            lease.borrowing ? " (borrowed)" : ""));
  // Started under leases_mu_, and only while not stopping: JoinWorkers collects the runs under
  // the same lock after StopAll, so it either sees this thread or this grant sees stopping_ and
  // starts none (the pool takes the lease back, as above). Assigning it after the lock, as before,
  // raced with JoinWorkers' joinable() (ThreadSanitizer), and a worker it missed was never joined:
  // std::terminate when the run was destroyed.
  MutexLock lock(&leases_mu_);
  if (stopping_.load()) return;
  raw->thread = std::thread([this, raw] { LeaseThread(raw); });
}

bool LeaseManager::Adopt(const std::string& request_id, std::unique_ptr<LeaseRun>& run,
                         std::vector<std::unique_ptr<LeaseRun>>& reaped) {
  MutexLock lock(&leases_mu_);
  for (auto it = finished_runs_.begin(); it != finished_runs_.end();) {
    if ((*it)->finished.load() && !stopping_.load()) {
      reaped.push_back(std::move(*it));
      it = finished_runs_.erase(it);
    } else {
      ++it;
    }
  }
  auto pending = pending_requests_.find(request_id);
  if (pending == pending_requests_.end() || stopping_.load()) return false;
  run->shape = pending->second;
  pending_requests_.erase(pending);
  --run->shape->queue->leases_requested;
  ++run->shape->queue->leases_held;
  const std::string lease_id = run->lease.id;
  runs_[lease_id] = std::move(run);
  return true;
}

void LeaseManager::LeaseThread(LeaseRun* run) {
  run_tasks_(run);
  ShapeQueue* q = run->shape->queue;
  bool lost = run->lost.load();
  // Reported before the release, so the event log never shows the capacity reused before it
  // was returned.
  events_.Emit(lost ? "lease-ended" : "lease-returned", run->lease.request.team, run->lease.id,
               run->revoked.load() ? "after revocation" : (lost ? "lost" : "idle"));
  run->ReleaseStreams();
  if (!lost) (void)pool_.ReleaseUsed(run->lease.id, static_cast<double>(run->busy_gpu_micros.load()) / 1e6);
  {
    MutexLock lock(&leases_mu_);
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
    MutexLock lock(&leases_mu_);
    for (auto it = pending_requests_.begin(); it != pending_requests_.end();) {
      if (it->second == run->shape && pool_.Withdraw(it->first).ok()) {
        --q->leases_requested;
        it = pending_requests_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

std::optional<std::string> LeaseManager::StopRun(const std::string& lease_id,
                                                 std::atomic<bool> LeaseRun::*flag) {
  MutexLock lock(&leases_mu_);
  auto it = runs_.find(lease_id);
  if (it == runs_.end()) return std::nullopt;
  LeaseRun& run = *it->second;
  (run.*flag).store(true);
  run.stop.store(true);
  run.shape->queue->WakeAll();
  return run.lease.request.team;
}

void LeaseManager::OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) {
  {
    MutexLock lock(&leases_mu_);
    if (auto it = runs_.find(lease_id); it != runs_.end()) it->second->revoke_deadline_s.store(deadline_s);
  }
  if (std::optional<std::string> team = StopRun(lease_id, &LeaseRun::revoked)) {
    events_.Emit("lease-revoked", *team, lease_id,
                 absl::StrCat(pool::RevokeCauseName(cause), ", stop by pool time ", deadline_s, " s"));
  }
}

void LeaseManager::OnLost(const std::string& lease_id, const std::string& why) {
  if (std::optional<std::string> team = StopRun(lease_id, &LeaseRun::lost)) {
    events_.Emit("lease-lost", *team, lease_id, why);
  }
}

void LeaseManager::OnRequestFailed(const std::string& request_id, const absl::Status& why) {
  TaskShape* shape = nullptr;
  {
    MutexLock lock(&leases_mu_);
    auto it = pending_requests_.find(request_id);
    if (it == pending_requests_.end()) return;
    shape = it->second;
    pending_requests_.erase(it);
    --shape->queue->leases_requested;
  }
  // The shape's queued tasks cannot get a lease: they fail with the reason, as a refused request's do.
  RefuseShape(shape, why);
}

void LeaseManager::StopAll() {
  MutexLock lock(&leases_mu_);
  for (const auto& [id, shape] : pending_requests_) (void)pool_.Withdraw(id);
  pending_requests_.clear();
  for (auto& [id, run] : runs_) run->stop.store(true);
}

void LeaseManager::JoinWorkers() {
  // Lease workers finish their running task, give their lease back and exit.
  std::vector<LeaseRun*> runs;
  {
    MutexLock lock(&leases_mu_);
    for (auto& [id, run] : runs_) runs.push_back(run.get());
    for (auto& run : finished_runs_) runs.push_back(run.get());
  }
  for (LeaseRun* run : runs) {
    if (run->thread.joinable()) run->thread.join();
  }
}

void LeaseManager::WaitForGrants() const {
  while (granting_.load() != 0) std::this_thread::yield();  // see OnGranted
}

}  // namespace gpupool::runtime
