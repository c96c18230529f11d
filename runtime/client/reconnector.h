// File: runtime/client/reconnector.h
//
// What a RemotePool does when its link to the head is lost: the reconnect state machine.
//
//   connected --loss--> (leases kept only while the head keeps them: its reclaim window)
//     without reconnect_for ----------------------------------> given up
//     with it: reconnecting --dial fails until reconnect_for--> given up
//                           --a fresh link--> resumed: Reclaim the leases held and the requests
//                              pending; lose the leases the head did not keep; give back those
//                              released while away; withdraw those withdrawn meanwhile; send
//                              again the requests the head did not keep queued --> connected
//   given up: held leases reported lost, pending requests failed (OnRequestFailed), then
//   on_disconnected; later calls fail with kUnavailable.
//
//   Reconnector reconnector({.mu = &mu_, .state = &state_, .callbacks = &callbacks_, ...});
//   reconnector.Start();            // once connected
//   reconnector.LinkLost(why);      // from the lost link's loop thread
//   ...{lock; state_.Stop();} reconnector.Stop();   // when the pool is destroyed
//
// The lock is the owner's (RemotePool::Impl::mu_): it guards the RemoteSessionState and the
// reconnect thread's waits, and is never held while calling the head, a listener (they are posted
// to the callback thread) or the dial function. Listener callbacks are posted in this order: the
// leases lost at the loss (or past the reclaim window); then, after a reconnection, the leases the
// head did not keep, and requests it refused when sent again; or, on giving up, the leases still
// held, the requests failed, and on_disconnected last.
#ifndef GPUPOOL_RUNTIME_CLIENT_RECONNECTOR_H_
#define GPUPOOL_RUNTIME_CLIENT_RECONNECTOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/client/callback_thread.h"
#include "runtime/client/remote_session_state.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class PoolLink;

class Reconnector {
 public:
  struct Deps {
    Mutex* mu = nullptr;  // the owner's lock; guards *state
    RemoteSessionState* state ABSL_PT_GUARDED_BY(mu) = nullptr;
    CallbackThread* callbacks = nullptr;      // the job's listeners are called there
    // Connects and authenticates anew (the reconnect thread, without the lock).
    std::function<absl::StatusOr<std::shared_ptr<PoolLink>>()> dial;
    std::chrono::milliseconds reconnect_for{0};  // 0: give up at the first loss
    std::function<void(const absl::Status&)> on_disconnected;  // posted once, on giving up
  };

  explicit Reconnector(Deps deps);
  ~Reconnector();  // Stop
  Reconnector(const Reconnector&) = delete;
  Reconnector& operator=(const Reconnector&) = delete;

  // Starts the reconnect thread (with reconnect_for only). Once, after the first link is set.
  void Start();
  // The current link was lost (its loop thread, RemotePool::Impl::Disconnected): loses the held
  // leases unless the head keeps them for a reclaim, then wakes the reconnect thread, or gives
  // up without reconnect_for. Without the lock.
  void LinkLost(const absl::Status& why) ABSL_LOCKS_EXCLUDED(deps_.mu);
  // Wakes and joins the reconnect thread; after the owner's state->Stop(). Without the lock.
  void Stop() ABSL_LOCKS_EXCLUDED(deps_.mu);

 private:
  // Reclaim's outcome: the leases it asked for, those the head kept (minus those released at
  // once), and the requests the head still has (queued, or granted meanwhile: not to be sent
  // again). kept and queued are empty when the call failed.
  struct Reclaimed {
    std::set<std::string> held, kept;
    std::set<std::string> queued;
  };

  void Run() ABSL_LOCKS_EXCLUDED(deps_.mu);  // the reconnect thread
  // Dials until a fresh link, reconnect_for or stopping; the lock is held on entry and return, and
  // released while dialing, waiting and losing leases. Null (with `why`) when none came in time.
  std::shared_ptr<PoolLink> Redial(absl::Status* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(deps_.mu);
  // On the fresh link, without the lock: reclaims, loses, withdraws and sends again.
  void Resume(PoolLink& fresh, RemoteSessionState::Resumption& taken) ABSL_LOCKS_EXCLUDED(deps_.mu);
  // Asks the fresh link for the leases `held` (and those `given_back` meanwhile, which it then
  // releases) and the requests still `waiting`.
  Reclaimed Reclaim(PoolLink& link, const RemoteSessionState::Holders& held, std::vector<std::string> given_back,
                    const std::vector<RemoteSessionState::Pending>& waiting) ABSL_LOCKS_EXCLUDED(deps_.mu);
  // Sends again the requests in `resend` the head did not keep (`queued`) and the job did not
  // withdraw meanwhile; a refusal fails the request through its listener.
  void Resend(PoolLink& fresh, const std::vector<RemoteSessionState::Pending>& resend,
              const std::set<std::string>& queued) ABSL_LOCKS_EXCLUDED(deps_.mu);
  void GiveUp(const absl::Status& why) ABSL_LOCKS_EXCLUDED(deps_.mu);
  // Reports the leases this job holds (those in `only` when given, but not those in `except`)
  // lost with `why`.
  void LoseHeldLeases(const std::string& why, const std::set<std::string>* only = nullptr,
                      const std::set<std::string>& except = {}) ABSL_LOCKS_EXCLUDED(deps_.mu);
  bool reconnects() const { return deps_.reconnect_for.count() > 0; }

  const Deps deps_;
  CondVar cv_;  // with *deps_.mu: a loss seen, or stopping
  std::thread thread_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_RECONNECTOR_H_
