// File: runtime/service/pool_server_impl.h
//
// The pool service's insides, shared by the files that implement it: pool_server.cc (the event
// loop, sessions and agents) and pool_server_durability.cc (the journal: what a restarted head
// takes back, what it keeps for jobs that are away, and what it writes). Not for other users.
#ifndef GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_IMPL_H_
#define GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_IMPL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <capnp/capability.h>
#include <kj/async-io.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_server.h"
#include "runtime/service/reclaim_book.h"

namespace gpupool::runtime {

// The journal's clock: Unix seconds (pool time restarts with the head; the ledger must not).
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A listener call from the pool's thread, waiting for the event loop.
struct PoolEvent {
  enum Kind { kGranted, kRevoked, kLost } kind;
  pool::Lease lease;       // kGranted
  std::string lease_id;
  pool::RevokeCause cause = pool::RevokeCause::kReclaim;
  double deadline_s = 0;
  std::string why;
};

class SessionImpl;
class AgentSessionImpl;

// Everything the server's event loop owns. The pool calls the LeaseListener methods on its own
// thread; they only queue. All other members are touched on the loop thread only, except where
// noted.
class PoolServer::Impl : public LeaseListener, private kj::TaskSet::ErrorHandler {
 public:
  Impl(std::unique_ptr<PoolService> pool, PoolServerOptions options)
      : pool_(std::move(pool)), options_(std::move(options)) {}
  ~Impl() noexcept override;

  absl::Status Start();

  // LeaseListener: the pool's thread.
  void OnGranted(const pool::Lease& lease) override {
    Push(PoolEvent{.kind = PoolEvent::kGranted, .lease = lease, .lease_id = lease.id});
  }
  void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) override {
    Push(PoolEvent{.kind = PoolEvent::kRevoked, .lease_id = lease_id, .cause = cause, .deadline_s = deadline_s});
  }
  void OnLost(const std::string& lease_id, const std::string& why) override {
    Push(PoolEvent{.kind = PoolEvent::kLost, .lease_id = lease_id, .why = why});
  }

  // Loop thread only.
  absl::Status Authenticate(const std::string& team, const std::string& token) const;
  absl::Status AuthenticateAgent(const std::string& token) const;
  // Checks an agent's node against the pool's and takes it up; the agent replaces any earlier
  // agent of that node.
  absl::StatusOr<std::string> RegisterAgent(capnp::Data::Reader inventory, AgentSessionImpl* agent);
  void AgentGone(const std::string& node, AgentSessionImpl* agent, const std::string& why);
  void Heartbeat(const std::string& node, AgentSessionImpl* agent);
  std::string Report();
  size_t AgentsUp() {
    size_t n = 0;
    executor_->executeSync([&] { n = agents_.size(); });
    return n;
  }
  std::string ReportFromAnyThread() {
    std::string out;
    executor_->executeSync([&] { out = Report(); });
    return out;
  }
  std::string TeamOfRequest(const std::string& request_id) const;
  std::string Usage(double from_s, double to_s, const std::string& group_by, absl::Status* st);

  // The journal, when there is one. Journal* return the ticket to wait for (0: nothing to wait).
  HeadJournal* journal() { return journal_.get(); }
  // Resolves once `ticket` is durable (at once without a journal); fails with its error.
  kj::Promise<absl::Status> Durable(JournalTicket ticket);
  void JournalLease(const pool::Lease& lease, const std::string& job);
  void JournalClose(const std::string& lease_id, const std::string& cause);
  absl::Status OpenJournal();
  uint64_t NextSessionNumber() { return next_session_++; }
  PoolService& pool() { return *pool_; }
  // After a request, withdrawal or release: one scheduling cycle runs on this thread once the
  // events ready now are handled (a burst of requests from many jobs shares one cycle), and its
  // grants go out at once, without waking the pool's thread.
  void ScheduleSoon();
  // A cycle now, on this thread, and what it decided sent at once (the request fast path).
  void ScheduleNow() {
    pool_->ScheduleNow();
    HandleQueued();
  }
  std::map<std::string, SessionImpl*>& by_request() { return by_request_; }
  std::map<std::string, SessionImpl*>& by_lease() { return by_lease_; }
  // Leases and queued requests kept for their job to reclaim (Session.reclaim): the previous
  // run's, taken back from the journal, and those of sessions lost while the head ran. Loop
  // thread once started.
  ReclaimBook& kept() { return kept_; }
  // Until when what is kept from now on is kept.
  ReclaimBook::Clock::time_point KeepUntil() const { return ReclaimBook::Clock::now() + options_.reclaim_window; }
  // What the book let go of goes back to the pool (and the journal), `why` in the ledger.
  void GiveBack(const ReclaimBook::Dropped& dropped, const std::string& why);
  // The newest session of each job key: an older one that ends (its connection found dead after
  // the job came back on a new one) keeps nothing for a reclaim that has already happened.
  void NewSession(const std::string& job_key, SessionImpl* session) {
    if (!job_key.empty()) newest_session_[job_key] = session;
  }
  // `session` ends: whether it was its job's newest.
  bool EndSession(const std::string& job_key, SessionImpl* session) {
    auto it = newest_session_.find(job_key);
    if (it == newest_session_.end() || it->second != session) return false;
    newest_session_.erase(it);
    return true;
  }
  // The head itself is stopping (loop thread).
  bool stopping() const { return stopping_; }

  // Constant after Start.
  std::unique_ptr<PoolService> pool_;
  PoolServerOptions options_;
  uint16_t port_ = 0;
  std::atomic<uint64_t> accepted_{0};

 private:
  void Run(std::promise<absl::Status>& started);
  void Push(PoolEvent e);
  kj::Promise<void> PumpEvents();
  void HandleQueued();  // what the pool told the server so far, in order
  void Handle(PoolEvent& e);
  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks);
  void taskFailed(kj::Exception&& e) override {
    if (e.getType() != kj::Exception::Type::DISCONNECTED) {
      std::fprintf(stderr, "gpupool head: connection task failed: %s\n", e.getDescription().cStr());
    }
  }

  std::thread thread_;
  kj::Own<const kj::Executor> executor_;           // set before Start returns
  kj::Own<kj::PromiseFulfiller<void>> stop_;       // loop thread; fulfilled via executor_
  kj::Maybe<capnp::Capability::Client> bootstrap_;  // loop thread

  std::mutex queue_mu_;
  std::deque<PoolEvent> queue_;                                // guarded by queue_mu_
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake_;        // guarded by queue_mu_
  bool queue_closed_ = false;                                  // guarded by queue_mu_

  std::unique_ptr<HeadJournal> journal_;
  bool cycle_soon_ = false;  // loop thread only

  struct Agent {
    AgentSessionImpl* session = nullptr;
    std::chrono::steady_clock::time_point last_heartbeat;
    bool silent = false;  // its node was taken down for missing heartbeats
  };
  kj::Promise<void> WatchHeartbeats(kj::Timer& timer);
  // Every quarter second: kept leases and requests whose reclaim window has passed go back.
  kj::Promise<void> GiveBackExpired(kj::Timer& timer);
  // Queues the previous run's requests again, kept for their jobs until `until`; the others
  // are dropped.
  void RequeueJournaledRequests(const std::vector<RequestRecord>& requests, ReclaimBook::Clock::time_point until);
  // Sessions are numbered past those of the previous run ("s<N>/..."), so ids never repeat.
  void NumberSessionsPast(const std::string& id);  // a request or lease id
  ReclaimBook kept_;
  std::map<std::string, SessionImpl*> newest_session_;  // by job key
  bool stopping_ = false;  // loop thread

  // Loop thread only: the live agent of each node, and who holds each pool request and lease.
  std::map<std::string, Agent> agents_;
  uint64_t next_session_ = 1;
  std::map<std::string, SessionImpl*> by_request_;
  std::map<std::string, SessionImpl*> by_lease_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_IMPL_H_
