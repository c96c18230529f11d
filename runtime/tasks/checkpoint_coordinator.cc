// File: runtime/tasks/checkpoint_coordinator.cc
//
// The checkpoint protocol at safe points: see checkpoint_coordinator.h.
#include "runtime/tasks/checkpoint_coordinator.h"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "runtime/gpu/device_copy.h"
#include "runtime/tasks/status_to_error.h"

namespace gpupool::runtime {
namespace {

// The state as host byte ranges, copying device regions to their host mirrors first.
std::vector<std::span<const std::byte>> StatePieces(detail::TaskState& state) {
  std::vector<std::span<const std::byte>> pieces;
  if (state.save) {
    state.saved = state.save();
    pieces.emplace_back(reinterpret_cast<const std::byte*>(state.saved.data()), state.saved.size());
    return pieces;
  }
  state.mirrors.resize(state.regions.size());
  for (size_t i = 0; i < state.regions.size(); ++i) {
    const StateRegion& r = state.regions[i];
    if (r.cuda_device < 0) {
      pieces.emplace_back(static_cast<const std::byte*>(r.data), r.bytes);
      continue;
    }
    if (state.mirrors[i].size() != r.bytes) state.mirrors[i] = PinnedHostBuffer(r.bytes);
    // After the kernels queued on the lease's stream there: the snapshot is of their result.
    void* stream = state.lease != nullptr ? state.lease->StreamOn(r.cuda_device) : nullptr;
    runtime::ThrowIfError(CopyDeviceToHost(state.mirrors[i].data(), r.data, r.bytes, r.cuda_device, stream));
    pieces.emplace_back(state.mirrors[i].data(), r.bytes);
  }
  return pieces;
}

}  // namespace

CheckpointCoordinator::CheckpointCoordinator(Deps deps)
    : pool_(*deps.pool),
      events_(*deps.events),
      job_id_(std::move(deps.job_id)),
      clock_speed_(deps.clock_speed),
      store_(std::make_unique<CheckpointService>(std::move(deps.store))) {}

std::optional<checkpoint::SnapshotInfo> CheckpointCoordinator::RestoreState(detail::TaskState& state, const std::string& key) {
  if (state.load) {
    std::optional<checkpoint::LoadedSnapshot> loaded = runtime::ValueOrThrow(store_->Restore(key));
    if (!loaded) return std::nullopt;
    state.load(std::string_view(reinterpret_cast<const char*>(loaded->payload.data()), loaded->payload.size()));
    return loaded->result.info;
  }
  std::vector<std::span<std::byte>> buffers;
  state.mirrors.resize(state.regions.size());
  for (size_t i = 0; i < state.regions.size(); ++i) {
    const StateRegion& r = state.regions[i];
    if (r.cuda_device >= 0) {
      if (state.mirrors[i].size() != r.bytes) state.mirrors[i] = PinnedHostBuffer(r.bytes);
      buffers.emplace_back(state.mirrors[i].data(), r.bytes);
    } else {
      buffers.emplace_back(static_cast<std::byte*>(r.data), r.bytes);
    }
  }
  std::optional<checkpoint::LoadResult> loaded = runtime::ValueOrThrow(store_->RestoreInto(key, buffers));
  if (!loaded) return std::nullopt;
  for (size_t i = 0; i < state.regions.size(); ++i) {
    const StateRegion& r = state.regions[i];
    if (r.cuda_device >= 0) {
      void* stream = state.lease != nullptr ? state.lease->StreamOn(r.cuda_device) : nullptr;
      runtime::ThrowIfError(CopyHostToDevice(r.data, state.mirrors[i].data(), r.bytes, r.cuda_device, stream));
    }
  }
  return loaded->info;
}

int64_t CheckpointCoordinator::MakeCheckpointable(detail::TaskState& state) {
  Task* task = state.task;
  if (state.checkpointable) {
    throw Error(ErrorCode::kFailedPrecondition,
                absl::StrCat("task '", task->name(), "' called Checkpointable twice in one run"));
  }
  state.checkpointable = true;
  state.last_safe_point_pool_s.store(pool_.Now(), std::memory_order_relaxed);
  {
    MutexLock lock(&checkpointable_mu_);
    checkpointable_runs_.insert(&state);
  }
  // Where a snapshot to resume from may be: the task's own key after an earlier run here, then
  // the key of the process whose work this is again (a dead rank's task rebuilt from lineage).
  std::vector<std::string> sources;
  if (task->checkpoint_key != nullptr) {
    sources.push_back(*task->checkpoint_key);
  } else {
    task->checkpoint_key = std::make_unique<std::string>(CheckpointKey(job_id_, task->id));
  }
  if (!task->resume_from.empty()) sources.push_back(task->resume_from);
  std::optional<checkpoint::SnapshotInfo> info;
  std::string loaded_from;
  for (const std::string& key : sources) {
    info = RestoreState(state, key);
    if (info) {
      loaded_from = key;
      break;
    }
  }
  if (!info) return 0;  // stopped before its first snapshot committed: a fresh start
  if (loaded_from == task->resume_from) {
    events_.Emit("task-resumed", task->shape->team, state.lease != nullptr ? state.lease->lease.id : "",
         absl::StrCat("task '", task->name(), "' resumes at step ", info->step, " from snapshot ",
                      loaded_from, " of the process that ran it first"));
  }
  state.resumed = true;
  state.step = info->step;
  return info->step;
}

void CheckpointCoordinator::SafePoint(detail::TaskState& state) {
  ++state.step;
  if (state.checkpointable) state.last_safe_point_pool_s.store(pool_.Now(), std::memory_order_relaxed);
  Task* task = state.task;
  LeaseRun* lease = state.lease;
  if (lease != nullptr && lease->lost.load(std::memory_order_relaxed)) {
    throw Error(ErrorCode::kAborted, absl::StrCat("task '", task->name(), "' stopped at step ", state.step,
                                                  ": its lease was lost"));
  }
  if (lease != nullptr && lease->revoked.load(std::memory_order_relaxed)) {
    if (state.checkpointable && !task->cancelled.load()) {
      // The snapshot must be durable before the lease goes back: the next run, maybe on another
      // GPU at once, loads it. Staging may wait for memory, but not past the grace period.
      double left_pool_s = lease->revoke_deadline_s.load() - pool_.Now();
      absl::Time deadline = absl::Now() + absl::Seconds(std::max(0.0, left_pool_s / clock_speed_));
      absl::StatusOr<checkpoint::SnapshotInfo> s =
          store_->SnapshotNow(*task->checkpoint_key, state.step, StatePieces(state), deadline);
      if (s.ok()) {
        state.snapshot_at_stop = true;
        task->shape->counters.snapshots.fetch_add(1, std::memory_order_relaxed);
        pool_.Checkpointed(lease->lease.id, CheckpointNote{*task->checkpoint_key, s->version, s->step, s->path});
      } else {
        events_.Emit("checkpoint-failed", task->shape->team, lease->lease.id,
             absl::StrCat("task '", task->name(), "' step ", state.step, ": ", s.status().message()));
      }
    }
    throw Error(ErrorCode::kAborted, absl::StrCat("task '", task->name(), "' was preempted at step ", state.step));
  }
  if (task->cancelled.load(std::memory_order_relaxed) ||
      (lease != nullptr && lease->stop.load(std::memory_order_relaxed))) {
    throw Error(ErrorCode::kCancelled, "task '" + task->name() + "' was stopped at a safe point");
  }
  double interval = task->shape->checkpoint_interval_s;
  if (!state.checkpointable || interval <= 0) return;
  double now = pool_.Now();
  double since = state.last_snapshot_pool_s >= 0 ? state.last_snapshot_pool_s : state.started_pool_s;
  if (now - since < interval) return;
  ShapeCounters* counters = &task->shape->counters;
  // The pool learns of the commit (its victim choice counts work at risk since then). The writer
  // runs this callback; store_ is destroyed first, draining the writer, and JobRuntime destroys
  // this coordinator before the pool client.
  std::string lease_id = lease != nullptr ? lease->lease.id : "";
  absl::Status s = store_->SnapshotAsync(
      *task->checkpoint_key, state.step, StatePieces(state),
      [this, counters, lease_id, key = *task->checkpoint_key](const checkpoint::SnapshotInfo& info) {
        counters->snapshots.fetch_add(1, std::memory_order_relaxed);
        if (!lease_id.empty()) pool_.Checkpointed(lease_id, CheckpointNote{key, info.version, info.step, info.path});
      });
  if (s.ok()) {
    state.last_snapshot_pool_s = now;
  } else if (!absl::IsResourceExhausted(s)) {  // no staging room: still due at the next safe point
    state.last_snapshot_pool_s = now;           // a failing disk: warn once per interval, not per step
    events_.Emit("checkpoint-failed", task->shape->team, lease != nullptr ? lease->lease.id : "",
         absl::StrCat("task '", task->name(), "' step ", state.step, ": ", s.message()));
  }
}

void CheckpointCoordinator::EndCheckpointableRun(detail::TaskState& state) {
  MutexLock lock(&checkpointable_mu_);
  checkpointable_runs_.erase(&state);
}

std::vector<OverdueTask> CheckpointCoordinator::OverdueTasks() const {
  std::vector<OverdueTask> overdue;
  double now = pool_.Now();
  MutexLock lock(&checkpointable_mu_);
  for (const detail::TaskState* s : checkpointable_runs_) {
    double interval = s->task->shape->checkpoint_interval_s;
    double since = now - s->last_safe_point_pool_s.load(std::memory_order_relaxed);
    if (interval > 0 && since > 2 * interval) {
      overdue.push_back(OverdueTask{s->task->name(), s->task->id, s->task->shape->team, since, interval});
    }
  }
  return overdue;
}

void CheckpointCoordinator::Forget(const std::string& checkpoint_key) {
  store_->Forget(checkpoint_key);
  pool_.ForgetCheckpoints(checkpoint_key);
}

}  // namespace gpupool::runtime
