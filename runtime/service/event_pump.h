// File: runtime/service/event_pump.h
//
// The head's event pump: what the pool tells its listener on the pool's thread (a grant, a
// revocation, a loss) is queued here and handed, in order, to a handler on the server's event
// loop, so that everything the sessions hold stays confined to that one thread. It also runs
// the scheduling cycles the loop asks for (ScheduleSoon / ScheduleNow), whose listener calls
// come back through the same queue. Internal to the service's RPC server (pool_server.cc).
//
//   EventPump pump(pool, [&](PoolEvent& e) { DeliverPoolEvent(deps, e); });
//   pool.Request(request, &pump);        // the pump is the pool's LeaseListener
//   tasks.add(pump.Run());               // on the loop thread, once the loop runs
//   ...
//   pump.Close();                        // loop thread, after the loop's tasks are gone
#ifndef GPUPOOL_RUNTIME_SERVICE_EVENT_PUMP_H_
#define GPUPOOL_RUNTIME_SERVICE_EVENT_PUMP_H_

#include <deque>
#include <functional>
#include <string>

#include <kj/async.h>

#include "absl/base/thread_annotations.h"
#include "runtime/service/pool_service.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

// A listener call from the pool's thread, waiting for the event loop.
struct PoolEvent {
  enum Kind { kGranted, kRevoked, kLost } kind;
  pool::Lease lease;       // kGranted
  std::string lease_id;
  pool::RevokeCause cause = pool::RevokeCause::kReclaim;
  double deadline_s = 0;
  std::string why;
};

class EventPump : public LeaseListener {
 public:
  // `pool` must outlive every call but the LeaseListener ones (the pool's own): the owner stops
  // the pool before destroying the pump, so no listener call reaches a destroyed pump.
  // `handle` is called on the loop thread, once per event, in the order the pool sent them.
  EventPump(PoolService& pool, std::function<void(PoolEvent&)> handle)
      : pool_(pool), handle_(std::move(handle)) {}
  ~EventPump() noexcept override;  // kj::Own's destructor may throw; this one may not

  // LeaseListener: the pool's thread (or the loop thread, inside a cycle it runs). They only
  // queue, and wake the loop; after Close they drop the event.
  void OnGranted(const pool::Lease& lease) override {
    Push(PoolEvent{.kind = PoolEvent::kGranted, .lease = lease, .lease_id = lease.id});
  }
  void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) override {
    Push(PoolEvent{.kind = PoolEvent::kRevoked, .lease_id = lease_id, .cause = cause, .deadline_s = deadline_s});
  }
  void OnLost(const std::string& lease_id, const std::string& why) override {
    Push(PoolEvent{.kind = PoolEvent::kLost, .lease_id = lease_id, .why = why});
  }

  // Loop thread only, from here on.
  // Hands queued events to the handler as they come, for as long as the loop runs (add it to
  // the loop's task set; it never resolves).
  kj::Promise<void> Run();
  // What the pool told the server so far, handed to the handler now, in order.
  void HandleQueued();
  // After a request, withdrawal or release: one scheduling cycle runs on this thread once the
  // events ready now are handled (a burst of requests from many jobs shares one cycle), and its
  // grants go out at once, without waking the pool's thread. Idempotent until that cycle runs.
  void ScheduleSoon();
  // A cycle now, on this thread, and what it decided sent at once (the request fast path).
  void ScheduleNow() {
    pool_.ScheduleNow();
    HandleQueued();
  }
  // The loop is stopping: what is queued is dropped, and so is whatever the pool says from now
  // on. Called once the loop's tasks (and Run) are gone.
  void Close();

 private:
  void Push(PoolEvent e) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  PoolService& pool_;
  const std::function<void(PoolEvent&)> handle_;

  Mutex mu_;
  std::deque<PoolEvent> queue_ ABSL_GUARDED_BY(mu_);
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake_ ABSL_GUARDED_BY(mu_);  // Run waits on it
  bool closed_ ABSL_GUARDED_BY(mu_) = false;

  // The loop thread's: ScheduleSoon and the cycle it defers say so (loop_.AssertOnThread()).
  ThreadConfined loop_;
  bool cycle_soon_ ABSL_GUARDED_BY(loop_) = false;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_EVENT_PUMP_H_
