// File: runtime/client/remote_session_state.h
//
// What a RemotePool knows of its session with the head, as data: the current link, the head's
// clock, the leases this job holds (and their cost), the requests it made that are not granted
// yet, and where the session stands (connected, reconnecting after a loss, given up, stopping).
// Each method is one decision RemotePool (runtime/client/remote_pool.cc) or its Reconnector
// (runtime/client/reconnector.h) makes inside one of its critical sections; the calls to the head
// and to the job's listeners that follow are theirs. No sockets, no threads: the link is only
// held here (shared_ptr of an incomplete type), never called.
//
//   std::shared_ptr<PoolLink> link;
//   absl::Status st = state.AddPending(request, listener, &link);  // under the owner's lock
//   ...unlock; if (st.ok() && link != nullptr) link->Request(request, listener);
//
// Not thread-safe: every method requires the owner's lock (RemotePool::Impl::mu_, which its
// Reconnector shares).
#ifndef GPUPOOL_RUNTIME_CLIENT_REMOTE_SESSION_STATE_H_
#define GPUPOOL_RUNTIME_CLIENT_REMOTE_SESSION_STATE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/client/lease_book.h"
#include "runtime/client/pool_client.h"

namespace gpupool::runtime {

class PoolLink;  // runtime/client/pool_link.h; only held here

class RemoteSessionState {
 public:
  struct Pending {  // accepted, not granted yet: reclaimed, or sent again, after a reconnection
    pool::LeaseRequest request;
    LeaseListener* listener = nullptr;
  };
  using Holders = std::vector<std::pair<std::string, LeaseListener*>>;  // (lease or request id, listener)
  // What a reconnection takes over, captured as the fresh link replaces the old one (before any
  // grant can arrive on it).
  struct Resumption {
    std::shared_ptr<PoolLink> old;        // the dead link, to be closed without the lock
    Holders held;                         // the leases held through the loss
    std::vector<std::string> given_back;  // leases released while away
    std::vector<Pending> resend;          // the requests not granted yet
  };

  // --- The head's clock, from its reading at the last connection.
  void SetClock(double pool_now_s, double clock_speed);  // at a connection; starts counting now
  double Now() const;

  // --- The link.
  // The current link: null once given up (or stopping), and before the first one.
  const std::shared_ptr<PoolLink>& link() const { return link_; }
  void SetFirstLink(std::shared_ptr<PoolLink> link) { link_ = std::move(link); }
  // The pool is being destroyed: returns the link, and the reconnect thread stops.
  std::shared_ptr<PoolLink> Stop();
  bool stopping() const { return stopping_; }
  uint64_t reconnections() const { return reconnections_; }

  // --- This job's leases.
  // A grant: the request is no longer pending; the lease is held from now.
  void Granted(const pool::Lease& lease, LeaseListener* user);
  void Close(const std::string& lease_id) { leases_.Close(lease_id, Now()); }  // into the ledger
  bool Holds(const std::string& lease_id) const { return leases_.Find(lease_id) != nullptr; }
  std::map<std::string, LedgerTeam> Ledger() const { return leases_.Totals(Now()); }
  // The leases held (those in `only` when given, but not those in `except`).
  Holders HeldLeases(const std::set<std::string>* only, const std::set<std::string>& except) const;

  // --- This job's requests.
  // Records `r` as pending unless it is already; why not when it cannot be sent. Sets `link` to
  // the link to send it on, or null while reconnecting (then it waits for the new link).
  absl::Status AddPending(const pool::LeaseRequest& r, LeaseListener* listener, std::shared_ptr<PoolLink>* link);
  // The head refused `r` (or the call failed with `st`): forgets it, unless a reconnection will
  // send it again. True when the caller should report `st`.
  bool Refused(const pool::LeaseRequest& r, const absl::Status& st);
  // Forgets the request. Returns the answer, or OK with `link` set to the link to ask the head on.
  absl::Status Withdraw(const std::string& request_id, std::shared_ptr<PoolLink>* link);
  bool IsPending(const std::string& request_id) const { return pending_.count(request_id) != 0; }
  bool ForgetPending(const std::string& request_id) { return pending_.erase(request_id) > 0; }
  // While reconnecting, a release is closed here and given back once reclaimed: true then.
  bool ReleaseWhileAway(const std::string& lease_id);
  // Released while away, but the reclaim that was to give them back failed: for the next one.
  void ReleaseLater(const std::vector<std::string>& lease_ids);

  // --- Loss and reconnection.
  struct Loss {
    absl::Status why;
    // Until when the head keeps this job's leases (its reclaim window), so the job keeps them too.
    std::chrono::steady_clock::time_point keep_leases_until;
  };
  // The link was lost and a reconnection will follow: from here requests and releases wait for it.
  void LinkLost(Loss loss);
  bool link_lost() const { return link_lost_; }
  const Loss& loss() const { return loss_; }  // the last one
  // A fresh link replaces the lost one; what it must take over.
  Resumption Reconnected(std::shared_ptr<PoolLink> fresh);
  // No fresh link in time: returns the lost one (the link is null from here).
  std::shared_ptr<PoolLink> Abandon();
  // For good: later requests fail. Returns the pending requests, forgotten, to be failed.
  Holders GiveUp();

 private:
  // Shared: callers use a link without the lock while a reconnection may replace it.
  std::shared_ptr<PoolLink> link_;
  double pool_now_at_connect_ = 0;
  double clock_speed_ = 1;
  std::chrono::steady_clock::time_point connected_at_;
  LeaseBook leases_;                        // this job's leases and their cost
  std::map<std::string, Pending> pending_;  // by the job's request id
  // Reconnection: a loss seen, waiting for the reconnect thread; or given up.
  bool link_lost_ = false;
  std::vector<std::string> released_while_away_;  // leases given back while reconnecting
  Loss loss_;
  bool gave_up_ = false;
  bool stopping_ = false;
  uint64_t reconnections_ = 0;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_REMOTE_SESSION_STATE_H_
