#include "runtime/service/listener_outbox.h"

#include <utility>

namespace gpupool::runtime {

void ListenerOutbox::Granted(LeaseListener* listener, const pool::Lease& lease) {
  Push(Call{listener, Call::kGranted, lease});
}

void ListenerOutbox::Revoked(LeaseListener* listener, const std::string& lease_id, pool::RevokeCause cause,
                             double deadline_s) {
  Call call{listener, Call::kRevoked, pool::Lease{}};
  call.lease.id = lease_id;
  call.cause = cause;
  call.deadline_s = deadline_s;
  Push(std::move(call));
}

void ListenerOutbox::Lost(LeaseListener* listener, const std::string& lease_id, const std::string& why) {
  Call call{listener, Call::kLost, pool::Lease{}};
  call.lease.id = lease_id;
  call.why = why;
  Push(std::move(call));
}

void ListenerOutbox::Push(Call call) {
  MutexLock lock(&mu_);
  calls_.push_back(std::move(call));
}

bool ListenerOutbox::empty() const {
  MutexLock lock(&mu_);
  return calls_.empty();
}

void ListenerOutbox::Clear() {
  MutexLock lock(&mu_);
  calls_.clear();
}

void ListenerOutbox::Deliver() {
  MutexLock lock(&mu_);
  // A listener that calls back into a delivering method: the loop below delivers what it added.
  if (delivering_ && deliverer_ == std::this_thread::get_id()) return;
  // Another thread is delivering: wait for it, so that what this call queued is delivered, in
  // order, before it returns.
  delivered_cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !delivering_; });
  delivering_ = true;
  deliverer_ = std::this_thread::get_id();
  while (!calls_.empty()) {
    std::vector<Call> batch;
    batch.swap(calls_);
    lock.Unlock();
    for (Call& c : batch) {
      switch (c.kind) {
        case Call::kGranted: c.listener->OnGranted(c.lease); break;
        case Call::kRevoked: c.listener->OnRevoked(c.lease.id, c.cause, c.deadline_s); break;
        case Call::kLost: c.listener->OnLost(c.lease.id, c.why); break;
      }
    }
    lock.Lock();
  }
  delivering_ = false;
  deliverer_ = std::thread::id();
  lock.Unlock();
  delivered_cv_.NotifyAll();
}

}  // namespace gpupool::runtime
