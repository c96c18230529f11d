// File: runtime/tasks/runtime_events.h
//
// The job runtime's event reports (RuntimeOptions::on_event: leases granted, revoked, lost and
// returned, tasks preempted and resumed, failed checkpoints), stamped with pool time.
//
// Owned by JobRuntime; its parts (LeaseManager, Executor, CheckpointCoordinator) hold a reference.
// Thread-safety: constant after construction. Emit calls the sink on the caller's thread (any of
// the runtime's threads, or the pool's callback thread), as RuntimeOptions::on_event promises.
#ifndef GPUPOOL_RUNTIME_TASKS_RUNTIME_EVENTS_H_
#define GPUPOOL_RUNTIME_TASKS_RUNTIME_EVENTS_H_

#include <functional>
#include <memory>
#include <string>

#include "gpupool/runtime.h"
#include "runtime/client/pool_client.h"

namespace gpupool::runtime {

class RuntimeEvents {
 public:
  // `sink` and `pool` belong to the owner and must outlive this. `pool` is read at each Emit, so
  // an event is stamped 0 while the owner holds no pool (before it joined one, after it let go).
  RuntimeEvents(const std::function<void(const RuntimeEvent&)>& sink, const std::unique_ptr<PoolClient>& pool)
      : sink_(sink), pool_(pool) {}

  void Emit(const std::string& kind, const std::string& team, const std::string& lease,
            const std::string& detail) const {
    if (!sink_) return;
    sink_(RuntimeEvent{pool_ != nullptr ? pool_->Now() : 0, kind, team, lease, detail});
  }

 private:
  const std::function<void(const RuntimeEvent&)>& sink_;
  const std::unique_ptr<PoolClient>& pool_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_RUNTIME_EVENTS_H_
