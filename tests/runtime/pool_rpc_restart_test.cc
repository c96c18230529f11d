// A head that goes away and comes back (a restart), and jobs cut off from a head that runs on
// (a network blip): what the jobs held and asked for survives both, through the head's journal
// and Session.reclaim. Real PoolServer, RemotePool clients and SQLite journal files in one
// process, over 127.0.0.1; a TcpProxy cuts a job off, and keeps it away, when a test says so.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_ids.h"
#include "runtime/service/pool_server.h"
#include "runtime/client/remote_pool.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/owner_borrower_config.h"
#include "tests/runtime/tcp_proxy.h"
#include "tests/runtime/test_head.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Polls `done` every 10 ms for up to `timeout`.
template <typename Done>
bool Eventually(Done done, milliseconds timeout = seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

// A head with one GPU of team owner, on 127.0.0.1:`port` (0: any); durable with a journal path.
std::unique_ptr<PoolServer> StartOwnerHead(const std::string& journal, uint16_t port, milliseconds reclaim_window) {
  PoolServiceOptions po;
  po.pool.simulate = "1xH100-80GB";
  po.config_text = kOwnerBorrowerConfig;
  PoolServerOptions so;
  so.port = port;
  so.team_tokens = {{"owner", "owner-token"}};
  so.journal_path = journal;
  so.reclaim_window = reclaim_window;
  return StartHead(po, so);
}

// One head on a port that survives its restarts, the jobs of team owner that use it (directly, or
// through a proxy that can cut them off and keep them away) and the recorders that hear them.
// Jobs end before the recorders they call, and both before the head.
class PoolRpcRestart : public ::testing::Test {
 protected:
  enum Path { kDirect, kThroughProxy };

  ~PoolRpcRestart() override {
    jobs_.clear();
    head_.reset();
    // The journal, SQLite's side files and the head's lock file.
    for (const char* suffix : {"", "-wal", "-shm", "-journal", "-lock"}) {
      if (!journal_.empty()) std::remove((journal_ + suffix).c_str());
    }
  }

  // Starts the head: with a journal (a fresh file) unless `durable` is false.
  void Start(bool durable = true, milliseconds reclaim_window = seconds(30)) {
    if (durable) {
      journal_ = ::testing::TempDir() + "/" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                 std::to_string(::getpid()) + ".db";
      std::remove(journal_.c_str());
    }
    head_ = StartOwnerHead(journal_, 0, reclaim_window);
    ASSERT_NE(head_, nullptr);
    port_ = head_->port();
    proxy_ = std::make_unique<TcpProxy>(port_);
  }
  // The head goes away (leaving its journal as a crash would) and comes back on the same port.
  void Restart(milliseconds reclaim_window = seconds(30)) {
    head_.reset();
    head_ = StartOwnerHead(journal_, port_, reclaim_window);
    ASSERT_NE(head_, nullptr);
  }
  // A job of team owner that reconnects for `reconnect_for` (0: never) after losing the head.
  RemotePool& Job(Path path = kDirect, milliseconds reconnect_for = seconds(20)) {
    auto job = RemotePool::Connect({.port = path == kDirect ? port_ : proxy_->port(), .team = "owner",
                                    .token = "owner-token", .reconnect_for = reconnect_for});
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) throw std::runtime_error("cannot connect");
    return *jobs_.emplace_back(*std::move(job));
  }
  Recorder& Listener() { return recorders_.emplace_back(); }
  // `job` asks for the one GPU as `id` and gets it.
  Recorder& Holding(RemotePool& job, const std::string& id) {
    Recorder& r = Listener();
    EXPECT_TRUE(job.Request(Req(id), &r).ok());
    EXPECT_TRUE(r.WaitFor("granted"));
    return r;
  }
  // `job` asks as `id`; answered once the head has it (durably, with a journal).
  Recorder& Asking(RemotePool& job, const std::string& id) {
    Recorder& r = Listener();
    EXPECT_TRUE(job.Request(Req(id), &r).ok());
    return r;
  }
  // The one GPU held by a direct job, and a job through the proxy waiting for it as "early".
  struct Contended {
    RemotePool& holder;
    Recorder& held;
    RemotePool& waiter;
    Recorder& early;
  };
  Contended HeldAndAwaited() {
    RemotePool& holder = Job();
    Recorder& held = Holding(holder, "held");
    RemotePool& waiter = Job(kThroughProxy);
    return {holder, held, waiter, Asking(waiter, "early")};  // answered once durable
  }
  // The job loses its connection and cannot make a new one until Welcome.
  void CutOff(RemotePool& job) {
    proxy_->Refuse(true);
    proxy_->CutAll();
    ASSERT_TRUE(Eventually([&] { return !job.connected(); }));
  }
  void Welcome() { proxy_->Refuse(false); }
  // The lease the head holds for the request the job called `client_id` ("" if none).
  std::string LeaseFor(const std::string& client_id) {
    for (const pool::Lease& l : head_->pool().Leases()) {
      if (ClientIdOf(l.request.id) == client_id) return l.id;
    }
    return "";
  }
  // The journal as a restarted head would read it (the head must be stopped).
  HeadState JournalState() {
    absl::StatusOr<std::unique_ptr<HeadJournal>> opened = HeadJournal::Open(journal_);
    EXPECT_TRUE(opened.ok()) << opened.status();
    absl::StatusOr<HeadState> state = opened.ok() ? (*opened)->Load() : opened.status();
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *std::move(state) : HeadState{};
  }

  std::string journal_;  // empty: no journal
  uint16_t port_ = 0;
  std::unique_ptr<PoolServer> head_;
  std::unique_ptr<TcpProxy> proxy_;
  std::deque<Recorder> recorders_;  // before jobs_: outlives them
  std::vector<std::unique_ptr<RemotePool>> jobs_;
};

// ---- Without a journal: the leases are lost, nothing the job asked for is forgotten. ----

// The new head knows nothing of the job's lease (lost); its queued request is sent again and
// granted there, and new requests work.
TEST_F(PoolRpcRestart, AJobReconnectsAndItsQueuedRequestIsAdmittedAgain) {
  Start(/*durable=*/false);
  RemotePool& job = Job();
  Recorder& held = Holding(job, "held");
  Recorder& queued = Asking(job, "queued");  // the one GPU is taken: it waits
  head_.reset();
  ASSERT_TRUE(held.WaitFor("lost"));
  Restart();
  ASSERT_TRUE(queued.WaitFor("granted")) << "the queued request was not admitted by the new head";
  EXPECT_EQ(queued.last_lease().request.id, "queued");
  EXPECT_EQ(job.reconnections(), 1u);
  EXPECT_TRUE(job.Release(queued.last_lease().id).ok());
  Recorder& later = Holding(job, "later");
  EXPECT_TRUE(job.Release(later.last_lease().id).ok());
}

// A head that does not come back in time: requests still waiting fail through their listener
// with the reason, the job hears of the disconnection, and new requests are refused at once.
TEST_F(PoolRpcRestart, AJobThatCannotReconnectFailsItsWaitingRequests) {
  Start(/*durable=*/false);
  std::promise<absl::Status> disconnected;
  Recorder& held = Listener();
  Recorder& queued = Listener();
  Recorder& refused = Listener();
  auto job = RemotePool::Connect({.port = port_, .team = "owner", .token = "owner-token",
                                  .on_disconnected = [&](const absl::Status& why) { disconnected.set_value(why); },
                                  .reconnect_for = milliseconds(300)});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  ASSERT_TRUE((*job)->Request(Req("queued"), &queued).ok());
  head_.reset();
  ASSERT_TRUE(queued.WaitFor("request failed queued"));
  EXPECT_THAT(queued.events().back(), HasSubstr("unreachable"));
  auto why = disconnected.get_future();
  ASSERT_EQ(why.wait_for(seconds(20)), std::future_status::ready);
  absl::Status st = (*job)->Request(Req("after"), &refused);
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
}

// ---- Leases outlive a restart or a lost connection. ----

// The new head takes the lease back from its journal, the job reclaims it when it reconnects, and
// its task never hears of a loss; the GPU is not given to anyone else meanwhile, and the lease is
// released normally afterwards.
TEST_F(PoolRpcRestart, ALeaseHeldThroughAHeadRestartIsReclaimedNotLost) {
  Start();
  RemotePool& job = Job();
  Recorder& held = Holding(job, "held");
  const std::string lease = held.last_lease().id;
  Recorder& queued = Asking(job, "queued");  // the one GPU is taken: it waits

  Restart();
  ASSERT_TRUE(Eventually([&] { return job.reconnections() == 1; }));
  std::vector<pool::Lease> leases = head_->pool().Leases();
  ASSERT_EQ(leases.size(), 1u) << "the new head holds the lease for the job";
  EXPECT_EQ(leases[0].id, lease);
  // The queued request still waits behind it: nobody else got the GPU.
  std::this_thread::sleep_for(milliseconds(200));
  for (const std::string& e : held.events()) EXPECT_EQ(e.rfind("lost", 0), std::string::npos) << e;
  EXPECT_FALSE(queued.WaitFor("granted", 1, milliseconds(1))) << "the held GPU was given away";

  // Released to the new head like any lease: the queued request gets the GPU.
  ASSERT_TRUE(job.Release(lease).ok());
  ASSERT_TRUE(queued.WaitFor("granted"));
  EXPECT_TRUE(job.Release(queued.last_lease().id).ok());
}

// Nobody reclaims the previous run's lease (its job did not reconnect): the new head releases it
// when the reclaim window ends, and its GPU is granted again; the ledger says why.
TEST_F(PoolRpcRestart, ALeaseNobodyReclaimsIsReleasedAfterTheWindow) {
  Start();
  RemotePool& gone = Job(kDirect, milliseconds(0));  // does not reconnect: reports its lease lost
  Recorder& held = Holding(gone, "held");
  Restart(milliseconds(300));
  ASSERT_TRUE(held.WaitFor("lost"));
  EXPECT_EQ(head_->pool().Leases().size(), 1u) << "kept for a while for its job";
  RemotePool& job = Job();
  Recorder& next = Holding(job, "next");  // granted once the window ended
  EXPECT_TRUE(job.Release(next.last_lease().id).ok());
  jobs_.clear();
  head_.reset();
  absl::StatusOr<std::unique_ptr<HeadJournal>> opened = HeadJournal::Open(journal_);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<std::vector<LedgerEntry>> ledger = (*opened)->Ledger(0, 1e12);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  std::vector<std::string> causes;
  for (const LedgerEntry& e : *ledger) causes.push_back(e.end_cause);
  EXPECT_THAT(causes, ::testing::Contains("not reclaimed by its job"));
}

// A network blip, not a restart: the head keeps the job's lease for its reclaim window instead
// of giving the GPU away, the job's task keeps running, and the job reclaims the lease when it
// reconnects.
TEST_F(PoolRpcRestart, ALeaseOutlivesALostConnectionAndIsReclaimed) {
  Start();
  RemotePool& job = Job(kThroughProxy);
  Recorder& held = Holding(job, "held");
  RemotePool& other = Job();  // the same team asks for the one GPU: it must wait behind the lease
  Recorder& other_heard = Asking(other, "other");

  proxy_->CutAll();  // cut, not kept away: it reconnects at once
  ASSERT_TRUE(Eventually([&] { return job.reconnections() == 1; }));
  std::this_thread::sleep_for(milliseconds(200));
  for (const std::string& e : held.events()) EXPECT_EQ(e.rfind("lost", 0), std::string::npos) << e;
  EXPECT_FALSE(other_heard.WaitFor("granted", 1, milliseconds(1)))
      << "the GPU of a job that was only cut off was given to another";
  ASSERT_TRUE(job.Release(held.last_lease().id).ok());  // on the new session, like any lease
  ASSERT_TRUE(other_heard.WaitFor("granted"));
  EXPECT_TRUE(other.Release(other_heard.last_lease().id).ok());
}

// A job that ends says so: what it still holds goes back at once, not after the reclaim window.
TEST_F(PoolRpcRestart, AJobThatEndsGivesItsLeasesBackAtOnce) {
  Start();
  Holding(Job(), "held");
  jobs_.clear();  // ends holding the lease
  ASSERT_TRUE(Eventually([&] { return head_->pool().Leases().empty(); }, seconds(5)))
      << "kept for a reclaim that will not come";
}

// ---- Queued requests keep their place. ----

// The restarted head queues a request accepted before the restart again from its journal, for its
// job, and admits it while that job is still away, ahead of a request made after the restart; the
// job gets the lease when it is back.
TEST_F(PoolRpcRestart, AQueuedRequestKeepsItsPlaceThroughAHeadRestart) {
  Start();
  auto [holder, held, waiter, early] = HeldAndAwaited();

  proxy_->Refuse(true);  // the waiting job cannot get back yet
  Restart();
  EXPECT_EQ(head_->pool().pending_requests(), 1u) << "the restarted head forgot the accepted request";
  ASSERT_TRUE(Eventually([&] { return holder.reconnections() == 1; }));
  RemotePool& newcomer = Job();
  Recorder& late = Asking(newcomer, "late");
  ASSERT_TRUE(holder.Release(held.last_lease().id).ok());

  ASSERT_TRUE(Eventually([&] { return !LeaseFor("early").empty(); })) << "the GPU did not go to the request that was first";
  const std::string kept = LeaseFor("early");
  EXPECT_FALSE(late.WaitFor("granted", 1, milliseconds(200)));
  Welcome();
  ASSERT_TRUE(early.WaitFor("granted")) << "the job back did not hear of the grant made while it was away";
  EXPECT_EQ(early.last_lease().id, kept);
  EXPECT_EQ(early.last_lease().request.id, "early");
  ASSERT_TRUE(waiter.Release(kept).ok());
  ASSERT_TRUE(late.WaitFor("granted"));
  EXPECT_TRUE(newcomer.Release(late.last_lease().id).ok());
}

// A lost connection while the head runs on: the job's queued request is not withdrawn but kept,
// with its place, and admitted for the job while it is away.
TEST_F(PoolRpcRestart, AQueuedRequestOutlivesALostConnection) {
  Start();
  auto [holder, held, waiter, early] = HeldAndAwaited();

  CutOff(waiter);
  RemotePool& newcomer = Job();
  Recorder& late = Asking(newcomer, "late");
  ASSERT_TRUE(holder.Release(held.last_lease().id).ok());
  ASSERT_TRUE(Eventually([&] { return !LeaseFor("early").empty(); })) << "the request of the job cut off lost its place";
  EXPECT_FALSE(late.WaitFor("granted", 1, milliseconds(200)));
  // Operators see the lease as kept for a job that is away (`gpupool queue`: KEPT).
  EXPECT_THAT(head_->Report(), HasSubstr(R"("job_away":true)"));

  Welcome();
  ASSERT_TRUE(early.WaitFor("granted"));
  EXPECT_EQ(waiter.reconnections(), 1u);
  ASSERT_TRUE(waiter.Release(early.last_lease().id).ok());
  ASSERT_TRUE(late.WaitFor("granted"));
  EXPECT_TRUE(newcomer.Release(late.last_lease().id).ok());
}

// What a job gave up while it was away (a lease released, a request withdrawn) goes back to the
// pool as soon as it reconnects, not when the reclaim window (30 s) ends.
TEST_F(PoolRpcRestart, WhatAJobGaveUpWhileAwayGoesBackWhenItReturns) {
  Start();
  RemotePool& job = Job(kThroughProxy);
  Recorder& held = Holding(job, "held");
  Recorder& early = Asking(job, "early");

  CutOff(job);
  ASSERT_TRUE(job.Release(held.last_lease().id).ok());
  ASSERT_TRUE(job.Withdraw("early").ok());
  RemotePool& newcomer = Job();
  Recorder& late = Asking(newcomer, "late");
  EXPECT_FALSE(late.WaitFor("granted", 1, milliseconds(300))) << "the lease was not kept for its job";

  Welcome();
  ASSERT_TRUE(late.WaitFor("granted", 1, seconds(10))) << "what the job gave up while away waited for the end of the window";
  EXPECT_EQ(head_->pool().pending_requests(), 0u);
  EXPECT_FALSE(early.WaitFor("granted", 1, milliseconds(1)));
  EXPECT_TRUE(newcomer.Release(late.last_lease().id).ok());
}

// Nobody comes back for a request the previous run accepted: when the reclaim window ends it
// leaves the queue and the journal, and the next request gets the GPU.
TEST_F(PoolRpcRestart, ARequestNobodyReclaimsLeavesTheQueueAfterTheWindow) {
  Start();
  RemotePool& job = Job(kThroughProxy);  // never gets back
  Holding(job, "held");
  Asking(job, "early");
  proxy_->Refuse(true);
  Restart(milliseconds(300));
  EXPECT_EQ(head_->pool().pending_requests(), 1u);
  RemotePool& newcomer = Job();
  Recorder& next = Asking(newcomer, "next");
  ASSERT_TRUE(next.WaitFor("granted", 1, seconds(10)));
  EXPECT_TRUE(LeaseFor("early").empty()) << "a request nobody reclaimed was admitted after its window";
  EXPECT_EQ(head_->pool().pending_requests(), 0u);
  EXPECT_TRUE(newcomer.Release(next.last_lease().id).ok());
  jobs_.clear();
  head_.reset();
  EXPECT_TRUE(JournalState().requests.empty());
}

// A request admitted while its job is away, and then a second head restart before the job is
// back: the job, which still waits on the request, gets that lease when it returns.
TEST_F(PoolRpcRestart, AGrantMadeWhileAwayOutlivesAnotherRestart) {
  Start();
  auto [holder, held, waiter, early] = HeldAndAwaited();

  CutOff(waiter);
  ASSERT_TRUE(holder.Release(held.last_lease().id).ok());
  ASSERT_TRUE(Eventually([&] { return !LeaseFor("early").empty(); }));
  const std::string kept = LeaseFor("early");

  Restart();
  EXPECT_EQ(LeaseFor("early"), kept) << "the restarted head did not take the lease back";
  Welcome();
  ASSERT_TRUE(early.WaitFor("granted")) << "the job back did not hear of the grant";
  EXPECT_EQ(early.last_lease().id, kept);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(LeaseFor("early"), kept) << "the lease was given back instead of to its job";
  ASSERT_TRUE(waiter.Release(kept).ok());
}

}  // namespace
}  // namespace gpupool::runtime
