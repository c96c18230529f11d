// File: runtime/service/head_durability.h
//
// The head's durable side: its journal (runtime/service/journal/head_journal.h), what a restarted
// head takes back from it, and what it keeps for jobs that are away (ReclaimBook) and gives back
// when they do not return within the reclaim window. Without a journal path there is no journal:
// the Journal* calls do nothing and Durable resolves at once. Internal to the service's RPC
// server; the job sessions write through it.
//
//   HeadDurability durable({pool, pump, sessions}, options.journal_path, options.reclaim_window);
//   absl::Status st = durable.Open();   // before the loop runs: takes back the previous run's
//   tasks.add(durable.GiveBackExpired(timer));
//   return durable.Durable(journal->RecordRequest(...)).then(...);   // acknowledge once durable
//
// Threads: Open on the thread that starts the server, before its loop runs; everything else on
// the loop thread only. The journal itself is thread-safe (its own thread commits).
// Thread confinement, unchecked: no lock guards this state and clang's analysis (which checks
// locks) does not see it; only PoolServer::Impl's loop_ (ThreadConfined) marks the thread. A call
// from any other thread is a data race.
#ifndef GPUPOOL_RUNTIME_SERVICE_HEAD_DURABILITY_H_
#define GPUPOOL_RUNTIME_SERVICE_HEAD_DURABILITY_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>
#include <kj/timer.h>

#include "absl/status/status.h"
#include "runtime/service/event_pump.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/reclaim_book.h"
#include "runtime/service/session_directory.h"

namespace gpupool::runtime {

// The journal's clock: Unix seconds (pool time restarts with the head; the ledger must not).
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class HeadDurability {
 public:
  // What it works with; all outlive it. The pump is the listener of the leases and requests it
  // hands back to the pool, and runs the cycles that what it gives back calls for.
  struct Deps {
    PoolService& pool;
    EventPump& pump;
    SessionDirectory& sessions;  // numbered past the previous run's ids
  };
  HeadDurability(Deps deps, std::string journal_path, std::chrono::milliseconds reclaim_window)
      : deps_(deps), journal_path_(std::move(journal_path)), reclaim_window_(reclaim_window) {}

  // Opens the journal, when there is a path, and takes back what the previous run left: its
  // leases adopted by the pool and kept for their jobs, its queued requests queued again at
  // their place (kept likewise). Fails when the journal cannot be opened or read.
  absl::Status Open();
  // Commits what is queued and closes the journal (the server's destructor, once the pool has
  // stopped). Idempotent.
  void Close() { journal_.reset(); }

  // The journal, when there is one.
  HeadJournal* journal() { return journal_.get(); }
  // Resolves once `ticket` is durable (at once without a journal); fails with its error.
  kj::Promise<absl::Status> Durable(JournalTicket ticket);
  // A lease granted to job `job` (its key; what reclaims it after a restart).
  void JournalLease(const pool::Lease& lease, const std::string& job);
  // A lease closed, `cause` in the ledger.
  void JournalClose(const std::string& lease_id, const std::string& cause);

  // Leases and queued requests kept for their job to reclaim (Session.reclaim): the previous
  // run's, taken back from the journal, and those of sessions lost while the head ran.
  ReclaimBook& kept() { return kept_; }
  const ReclaimBook& kept() const { return kept_; }
  std::chrono::milliseconds reclaim_window() const { return reclaim_window_; }
  // Until when what is kept from now on is kept.
  ReclaimBook::Clock::time_point KeepUntil() const { return ReclaimBook::Clock::now() + reclaim_window_; }
  // What the book let go of goes back to the pool (and the journal), `why` in the ledger.
  void GiveBack(const ReclaimBook::Dropped& dropped, const std::string& why);
  // Every quarter second: kept leases and requests whose reclaim window has passed go back, for
  // as long as the loop runs (add it to the loop's task set; it never resolves).
  kj::Promise<void> GiveBackExpired(kj::Timer& timer);

 private:
  // Queues the previous run's requests again, kept for their jobs until `until`; the others
  // are dropped.
  void RequeueJournaledRequests(const std::vector<RequestRecord>& requests, ReclaimBook::Clock::time_point until);

  // Constant after construction.
  const Deps deps_;
  const std::string journal_path_;  // empty: no journal
  const std::chrono::milliseconds reclaim_window_;

  std::unique_ptr<HeadJournal> journal_;  // set by Open
  ReclaimBook kept_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HEAD_DURABILITY_H_
