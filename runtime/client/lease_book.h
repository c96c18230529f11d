// File: runtime/client/lease_book.h
//
// The leases a pool client has open and what leases have cost: for each open lease its listener,
// team, GPUs and start (pool seconds), and per team the GPU-seconds of the closed ones.
// PoolService keeps one for the whole pool; RemotePool one for its job's own leases (both are
// what PoolClient::Ledger reports).
//
//   book.Open("l-1", {listener, "vision", 0.5, /*borrowing=*/false, now});
//   book.Close("l-1", later);        // 0.5 x (later - now) GPU-seconds to "vision"
//   book.Totals(now);                // closed totals plus open leases up to `now`
//
// Not thread-safe: the owner's lock guards it.
#ifndef GPUPOOL_RUNTIME_CLIENT_LEASE_BOOK_H_
#define GPUPOOL_RUNTIME_CLIENT_LEASE_BOOK_H_

#include <map>
#include <string>

#include "runtime/client/pool_client.h"

namespace gpupool::runtime {

class LeaseBook {
 public:
  struct Lease {
    LeaseListener* listener = nullptr;
    std::string team;
    double gpus = 0;  // compute share, in GPUs
    bool borrowing = false;
    double started_s = 0;
  };

  // A granted lease; counts one lease for its team.
  void Open(const std::string& id, Lease lease) {
    ++closed_[lease.team].leases;
    open_[id] = std::move(lease);
  }
  // Its GPU-seconds go to its team's totals. False when it was not open.
  bool Close(const std::string& id, double now_s) {
    auto it = open_.find(id);
    if (it == open_.end()) return false;
    Add(closed_[it->second.team], it->second, now_s);
    open_.erase(it);
    return true;
  }
  const Lease* Find(const std::string& id) const {
    auto it = open_.find(id);
    return it == open_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Lease>& open() const { return open_; }
  // Per team: closed leases, plus open ones as if they closed at `now_s`.
  std::map<std::string, LedgerTeam> Totals(double now_s) const {
    std::map<std::string, LedgerTeam> out = closed_;
    for (const auto& [id, lease] : open_) Add(out[lease.team], lease, now_s);
    return out;
  }

 private:
  static void Add(LedgerTeam& team, const Lease& lease, double now_s) {
    double held = (now_s - lease.started_s) * lease.gpus;
    team.leased_gpu_s += held;
    if (lease.borrowing) team.borrowed_gpu_s += held;
  }

  std::map<std::string, Lease> open_;
  std::map<std::string, LedgerTeam> closed_;  // plus the count of every lease opened
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_LEASE_BOOK_H_
