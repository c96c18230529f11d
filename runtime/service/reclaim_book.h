// File: runtime/service/reclaim_book.h
//
// What the head keeps for jobs that are away, after a head restart (taken back from the journal)
// or a lost connection, for the head's reclaim window: their leases, on which their tasks run on,
// and their queued requests, which keep their place in the queue and may be admitted meanwhile
// (the lease then waits with its request). Only the job that owned them takes them back: the key
// it presented then must be the key it presents now.
//
//   book.KeepLease("s3/r1#1", key, until);
//   book.KeepRequest("s3/r2", {.job_key = key, .client_id = "r2", .team = "vision", .until = until});
//   book.Granted(lease);                         // "s3/r2" admitted while its job is away
//   auto r = book.TakeRequest(key, "r2");        // the job is back: r->granted holds that lease
//   ReclaimBook::Dropped rest = book.TakeRest(key);    // what it did not name: give it back
//   ReclaimBook::Dropped gone = book.TakeExpired(now); // past the window: give it back
//
// Not thread-safe: the server's event loop owns it.
#ifndef GPUPOOL_RUNTIME_SERVICE_RECLAIM_BOOK_H_
#define GPUPOOL_RUNTIME_SERVICE_RECLAIM_BOOK_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pool/scheduler/scheduler.h"

namespace gpupool::runtime {

class ReclaimBook {
 public:
  using Clock = std::chrono::steady_clock;

  struct KeptRequest {
    std::string job_key;
    std::string client_id;  // the job's own id for it (the pool's is "s<N>/" + client_id)
    std::string team;
    Clock::time_point until;
    std::optional<pool::Lease> granted;  // admitted while its job was away
  };
  // What goes back to the pool: leases to release, and requests (pool ids) never admitted, to
  // withdraw.
  struct Dropped {
    std::vector<std::string> leases;
    std::vector<std::string> requests;
    bool empty() const { return leases.empty() && requests.empty(); }
  };

  void KeepLease(const std::string& lease_id, const std::string& job_key, Clock::time_point until);
  // A lease kept both as itself and as the grant of its request (whose pool id is
  // lease.request.id, "s<N>/" + the job's id): the job takes it back by either name.
  void KeepGranted(const pool::Lease& lease, const std::string& job_key, const std::string& team,
                   Clock::time_point until);
  void KeepRequest(const std::string& pool_id, KeptRequest request);
  // A kept request was admitted: its lease is kept with it, until the same time. False when the
  // lease's request is not kept here.
  bool Granted(const pool::Lease& lease);
  // A kept lease (or a kept request's lease) was lost: nothing is left to take back. False when
  // it was not kept.
  bool Lost(const std::string& lease_id);

  // The job with `job_key` takes back a lease it names: false when it is not kept for that key.
  bool TakeLease(const std::string& lease_id, const std::string& job_key);
  // ... and a request, by its own id: its pool id and entry, or nullopt.
  std::optional<std::pair<std::string, KeptRequest>> TakeRequest(const std::string& job_key,
                                                                 const std::string& client_id);
  // Everything still kept for `job_key`, removed (the job is back and did not name it).
  Dropped TakeRest(const std::string& job_key);
  // Everything whose time is up at `now`, removed.
  Dropped TakeExpired(Clock::time_point now);

  // A kept request, by pool id (for reports); null when not kept.
  const KeptRequest* FindRequest(const std::string& pool_id) const;
  bool KeepsLease(const std::string& lease_id) const { return leases_.count(lease_id) != 0; }
  size_t lease_count() const { return leases_.size(); }
  size_t request_count() const { return requests_.size(); }

 private:
  struct KeptLease {
    std::string job_key;
    Clock::time_point until;
    std::string request;  // the kept request it was granted to ("" : kept as a lease)
  };
  // Removes a request and its index entry (not its lease).
  void EraseRequest(std::map<std::string, KeptRequest>::iterator it);
  // Removes every lease and request for which `drop(job_key, until)` holds, into `out`.
  template <typename Pred>
  void TakeIf(Pred drop, Dropped& out);

  std::map<std::string, KeptLease> leases_;      // by lease id
  std::map<std::string, KeptRequest> requests_;  // by pool request id
  std::map<std::pair<std::string, std::string>, std::string> by_job_;  // (key, client id) -> pool id
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_RECLAIM_BOOK_H_
