// File: runtime/service/listener_outbox.h
//
// The pool service's listener calls, queued in the order the pool decided them and made later,
// outside the service's lock (a listener may call back into the service). Scheduling cycles run on
// several threads (the service's own, ScheduleNow's, health reports'), so one thread delivers at a
// time and a grant can never reach its listener after the same lease's revocation.
//
//   outbox.Granted(listener, lease);   // with the service's lock held, as the cycle decides
//   ...                                // the service's lock dropped
//   outbox.Deliver();                  // makes every queued call, in order
//
// Thread-safe. Lock order: the service's lock, then the outbox's; the outbox's is never held while
// a listener runs.
#ifndef GPUPOOL_RUNTIME_SERVICE_LISTENER_OUTBOX_H_
#define GPUPOOL_RUNTIME_SERVICE_LISTENER_OUTBOX_H_

#include <string>
#include <thread>
#include <vector>

#include "pool/scheduler/scheduler.h"
#include "runtime/client/pool_client.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class ListenerOutbox {
 public:
  void Granted(LeaseListener* listener, const pool::Lease& lease);
  void Revoked(LeaseListener* listener, const std::string& lease_id, pool::RevokeCause cause, double deadline_s);
  void Lost(LeaseListener* listener, const std::string& lease_id, const std::string& why);
  bool empty() const;
  // Drops what is queued (before anybody listens).
  void Clear();

  // Makes the queued calls, in the order queued, whichever thread queued them; returns once what
  // was queued before the call has been delivered. From inside a listener call it returns at once:
  // the delivering loop below it delivers what the listener queued. Never with the service's lock.
  void Deliver() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Call {
    LeaseListener* listener;
    enum Kind { kGranted, kRevoked, kLost } kind;
    pool::Lease lease;  // kGranted; only the id otherwise
    pool::RevokeCause cause = pool::RevokeCause::kReclaim;
    double deadline_s = 0;
    std::string why;
  };
  void Push(Call call);

  mutable Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);  // not made yet, in order
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id deliverer_ ABSL_GUARDED_BY(mu_);
  CondVar delivered_cv_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_LISTENER_OUTBOX_H_
