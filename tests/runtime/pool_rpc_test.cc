// The pool's lease protocol over Cap'n Proto RPC on 127.0.0.1: a PoolServer and RemotePool
// clients in one process, each with its own threads, talking through real sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <map>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/head/embedded_pool.h"
#include "runtime/head/head_journal.h"
#include "runtime/head/pool_server.h"
#include "runtime/head/remote_pool.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/tcp_proxy.h"
#include "tests/runtime/test_head.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;

class PoolRpc : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartHead("1xH100-80GB", {{"owner", "owner-token"}, {"borrower", "borrower-token"}});
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(server_->port(), 0);
  }
  std::unique_ptr<RemotePool> Connect(const std::string& team, RemotePoolOptions o = {}) {
    o.port = server_->port();
    o.team = team;
    o.token = team + "-token";
    auto c = RemotePool::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  std::unique_ptr<PoolServer> server_;
};

TEST_F(PoolRpc, RequestIsGrantedThroughTheListener) {
  auto job = Connect("owner");
  Recorder r;
  ASSERT_TRUE(job->Request(Req("train"), &r).ok());
  ASSERT_TRUE(r.WaitFor("granted"));
  pool::Lease lease = r.last_lease();
  EXPECT_EQ(lease.request.id, "train");  // as the job named it
  EXPECT_EQ(lease.request.team, "owner");
  ASSERT_EQ(lease.gpus.size(), 1u);
  EXPECT_TRUE(job->Release(lease.id).ok());
  EXPECT_TRUE(absl::IsNotFound(job->Release(lease.id)));
}

// A request that fits at once comes back with its lease in the answer: by the time Request
// returns, the job already holds it (its ledger counts it), with no listener call to wait for.
// One that must wait is granted later through the listener, and the answer carries nothing.
TEST_F(PoolRpc, ARequestThatFitsAtOnceIsAnsweredWithItsLease) {
  auto job = Connect("owner");
  Recorder now, later;
  ASSERT_TRUE(job->Request(Req("now"), &now).ok());
  EXPECT_EQ(job->Ledger()["owner"].leases, 1u) << "the answer did not carry the lease";
  ASSERT_TRUE(now.WaitFor("granted"));
  ASSERT_TRUE(job->Request(Req("later"), &later).ok());  // the one GPU is taken
  EXPECT_EQ(job->Ledger()["owner"].leases, 1u);
  EXPECT_TRUE(later.events().empty());
  ASSERT_TRUE(job->Release(now.last_lease().id).ok());
  ASSERT_TRUE(later.WaitFor("granted"));
  EXPECT_EQ(later.last_lease().request.id, "later");
  EXPECT_EQ(job->Ledger()["owner"].leases, 2u);
  EXPECT_TRUE(job->Release(later.last_lease().id).ok());
}

// Submit does not wait for the head's answer: its refusal reaches the listener, named.
TEST_F(PoolRpc, ASubmittedRequestsRefusalReachesItsListener) {
  auto job = Connect("owner");
  Recorder granted, refused, duplicate;
  job->Submit(Req("fits"), &granted);
  ASSERT_TRUE(granted.WaitFor("granted"));
  job->Submit(Req("sneak", "borrower"), &refused);  // another team's token
  ASSERT_TRUE(refused.WaitFor("request failed sneak"));
  EXPECT_THAT(refused.events()[0], HasSubstr("cannot request for team 'borrower'"));
  job->Submit(Req("queued"), &duplicate);  // waits for the GPU
  job->Submit(Req("queued"), &duplicate);  // the same id again: refused by the job's client
  ASSERT_TRUE(duplicate.WaitFor("request failed queued"));
  EXPECT_THAT(duplicate.events()[0], HasSubstr("already pending"));
  ASSERT_TRUE(job->Release(granted.last_lease().id).ok());
  ASSERT_TRUE(duplicate.WaitFor("granted"));  // the first 'queued' is still served
  EXPECT_TRUE(job->Release(duplicate.last_lease().id).ok());
}

TEST_F(PoolRpc, OwnerReclaimRevokesTheBorrowerWithADeadline) {
  auto borrower = Connect("borrower");
  auto owner = Connect("owner");
  Recorder b, o;
  ASSERT_TRUE(borrower->Request(Req("borrowed"), &b).ok());
  ASSERT_TRUE(b.WaitFor("granted"));
  EXPECT_TRUE(b.last_lease().borrowing);
  ASSERT_TRUE(owner->Request(Req("mine"), &o).ok());
  ASSERT_TRUE(b.WaitFor("revoked"));
  EXPECT_EQ(b.revoke_cause, pool::RevokeCause::kReclaim);
  EXPECT_GT(b.revoke_deadline_s, 0);
  ASSERT_TRUE(borrower->Release(b.last_lease().id).ok());
  ASSERT_TRUE(o.WaitFor("granted"));
}

TEST_F(PoolRpc, WithdrawAPendingRequest) {
  auto job = Connect("owner");
  Recorder first, second;
  ASSERT_TRUE(job->Request(Req("first"), &first).ok());
  ASSERT_TRUE(first.WaitFor("granted"));
  ASSERT_TRUE(job->Request(Req("second"), &second).ok());  // no GPU left: pending
  EXPECT_TRUE(job->Withdraw("second").ok());
  EXPECT_TRUE(absl::IsNotFound(job->Withdraw("second")));
  ASSERT_TRUE(job->Release(first.last_lease().id).ok());
  // The withdrawn request is not granted the freed GPU: a third one is.
  Recorder third;
  ASSERT_TRUE(job->Request(Req("third"), &third).ok());
  ASSERT_TRUE(third.WaitFor("granted"));
  for (const auto& e : second.events()) ADD_FAILURE() << "withdrawn request heard: " << e;
}

TEST_F(PoolRpc, WrongTokenAndUnknownTeamAreRefused) {
  RemotePoolOptions o;
  o.port = server_->port();
  o.team = "owner";
  o.token = "guess";
  auto c = RemotePool::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsUnauthenticated(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("wrong token for team 'owner'"));
  o.team = "nobody";
  c = RemotePool::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("team 'nobody' is not known"));
}

TEST_F(PoolRpc, ASessionCannotTouchAnotherSessionsLeaseOrRequest) {
  auto a = Connect("owner");
  auto b = Connect("owner");  // the same team, another job
  Recorder ra, rb;
  ASSERT_TRUE(a->Request(Req("train"), &ra).ok());
  ASSERT_TRUE(ra.WaitFor("granted"));
  absl::Status st = b->Release(ra.last_lease().id);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  ASSERT_TRUE(b->Request(Req("waiting"), &rb).ok());
  EXPECT_TRUE(absl::IsNotFound(a->Withdraw("waiting")));  // names only its own requests
  // Requesting for another team is refused too.
  st = b->Request(Req("x", "borrower"), &rb);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_TRUE(a->Release(ra.last_lease().id).ok());  // still a's to give back
  ASSERT_TRUE(rb.WaitFor("granted"));
}

// An mpirun job's head gives all its teams the job's token: one session then requests for any of
// them, and still for no team whose token differs.
TEST(PoolRpcTokens, ASessionRequestsForEveryTeamItsTokenOpens) {
  auto server = StartHead("2xH100-80GB", {{"owner", "job-token"}, {"borrower", "job-token"}, {"default", "other-token"}});
  ASSERT_NE(server, nullptr);
  auto job = RemotePool::Connect({.port = server->port(), .team = "owner", .token = "job-token"});
  ASSERT_TRUE(job.ok()) << job.status();
  Recorder mine, borrowed, refused;
  ASSERT_TRUE((*job)->Request(Req("serve", "owner"), &mine).ok());
  ASSERT_TRUE((*job)->Request(Req("train", "borrower"), &borrowed).ok());
  ASSERT_TRUE(mine.WaitFor("granted"));
  ASSERT_TRUE(borrowed.WaitFor("granted"));
  EXPECT_EQ(borrowed.last_lease().request.team, "borrower");
  EXPECT_TRUE(borrowed.last_lease().borrowing);
  absl::Status st = (*job)->Request(Req("sneak", "default"), &refused);
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_TRUE((*job)->Release(mine.last_lease().id).ok());
  EXPECT_TRUE((*job)->Release(borrowed.last_lease().id).ok());
}

// A head that goes away and comes back on the same address (a restart): the job's lease is lost
// (the new head knows nothing of it), its queued request is sent again and granted there, and new
// requests work; nothing the job asked for is forgotten.
TEST(PoolRpcRestart, AJobReconnectsAndItsQueuedRequestIsAdmittedAgain) {
  std::unique_ptr<PoolServer> head = StartHead("1xH100-80GB", {{"owner", "owner-token"}});
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  Recorder held, queued, later;  // outlive the job
  auto job = RemotePool::Connect({.port = port, .team = "owner", .token = "owner-token",
                                  .reconnect_for = std::chrono::seconds(20)});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  ASSERT_TRUE((*job)->Request(Req("queued"), &queued).ok());  // the one GPU is taken: it waits

  head.reset();  // the head goes away
  ASSERT_TRUE(held.WaitFor("lost"));
  head = StartHead("1xH100-80GB", {{"owner", "owner-token"}}, port);
  ASSERT_NE(head, nullptr);
  ASSERT_TRUE(queued.WaitFor("granted")) << "the queued request was not admitted by the new head";
  EXPECT_EQ(queued.last_lease().request.id, "queued");
  EXPECT_EQ((*job)->reconnections(), 1u);
  EXPECT_TRUE((*job)->Release(queued.last_lease().id).ok());
  ASSERT_TRUE((*job)->Request(Req("later"), &later).ok());
  ASSERT_TRUE(later.WaitFor("granted"));
  EXPECT_TRUE((*job)->Release(later.last_lease().id).ok());
}

// A head that does not come back in time: requests still waiting fail through their listener
// with the reason, the job hears of the disconnection, and new requests are refused at once.
TEST(PoolRpcRestart, AJobThatCannotReconnectFailsItsWaitingRequests) {
  std::unique_ptr<PoolServer> head = StartHead("1xH100-80GB", {{"owner", "owner-token"}});
  ASSERT_NE(head, nullptr);
  Recorder held, queued, refused;
  std::promise<absl::Status> disconnected;
  auto job = RemotePool::Connect({.port = head->port(), .team = "owner", .token = "owner-token",
                                  .on_disconnected = [&](const absl::Status& why) { disconnected.set_value(why); },
                                  .reconnect_for = std::chrono::milliseconds(300)});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  ASSERT_TRUE((*job)->Request(Req("queued"), &queued).ok());
  head.reset();
  ASSERT_TRUE(queued.WaitFor("request failed queued"));
  EXPECT_THAT(queued.events().back(), HasSubstr("unreachable"));
  auto why = disconnected.get_future();
  ASSERT_EQ(why.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  absl::Status st = (*job)->Request(Req("after"), &refused);
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
}

TEST_F(PoolRpc, GarbageBytesDoNotHurtTheServer) {
  for (int round = 0; round < 20; ++round) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(server_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string junk;
    uint32_t x = 0x9e3779b9u * (round + 1);
    for (int i = 0; i < 64 + round * 97; ++i) {
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      junk.push_back(static_cast<char>(x));
    }
    if (round == 0) junk = std::string("\0\0\0\0\xff\xff\xff\x7f", 8);  // claims a 16 GiB segment
    (void)!::write(fd, junk.data(), junk.size());
    ::close(fd);
  }
  auto job = Connect("owner");
  Recorder r;
  ASSERT_TRUE(job->Request(Req("after-garbage"), &r).ok());
  ASSERT_TRUE(r.WaitFor("granted"));
  EXPECT_GE(server_->connections_accepted(), 21u);
}

TEST_F(PoolRpc, ClientIsToldWhenTheServerGoesAway) {
  std::mutex mu;
  std::condition_variable cv;
  bool told = false;
  absl::Status why;
  RemotePoolOptions o;
  o.on_disconnected = [&](const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    told = true;
    why = s;
    cv.notify_all();
  };
  auto job = Connect("owner", o);
  Recorder r;
  ASSERT_TRUE(job->Request(Req("train"), &r).ok());
  ASSERT_TRUE(r.WaitFor("granted"));
  server_.reset();
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return told; }));
  }
  EXPECT_TRUE(absl::IsUnavailable(why)) << why;
  EXPECT_TRUE(r.WaitFor("lost"));
  EXPECT_FALSE(job->connected());
  EXPECT_TRUE(absl::IsUnavailable(job->Release(r.last_lease().id)));
}

}  // namespace
}  // namespace gpupool::runtime

namespace gpupool::runtime {
namespace {

// A job tells the head of each committed snapshot: the lease's work at risk starts again from
// then (what reclaim and preemption minimise), and the head's checkpoint index (SQLite) records
// it until the job says the task is done.
TEST(PoolRpcCheckpoints, ACommittedSnapshotResetsTheLeasesWorkAtRiskAndIsIndexed) {
  const std::string journal = ::testing::TempDir() + "/checkpoint-index-" + std::to_string(::getpid()) + ".db";
  std::remove(journal.c_str());
  EmbeddedPoolOptions po;
  po.simulate = "1xH100-80GB";
  po.config_text = kOwnerBorrowerConfig;
  po.clock_speed = 1000;  // a pool second a millisecond
  PoolServerOptions so;
  so.team_tokens = {{"owner", "owner-token"}};
  so.journal_path = journal;
  std::unique_ptr<PoolServer> head = StartHead(po, so);
  ASSERT_NE(head, nullptr);
  {
    Recorder r;  // outlives the job
    auto job = RemotePool::Connect({.port = head->port(), .team = "owner", .token = "owner-token"});
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Request(Req("train"), &r).ok());
    ASSERT_TRUE(r.WaitFor("granted"));
    const std::string lease = r.last_lease().id;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ~100 pool s at risk
    (*job)->Checkpointed(lease, CheckpointNote{"job-h-1.task-7", 3, 120, "/ckpt/job-h-1.task-7/snap-3"});
    (*job)->Checkpointed(lease, CheckpointNote{"job-h-1.task-8", 1, 5, "/ckpt/job-h-1.task-8/snap-1"});
    (*job)->Checkpointed("not-mine", CheckpointNote{"job-h-1.task-9", 1, 1, ""});  // ignored: not held
    auto at_risk_since = [&]() -> std::pair<int64_t, int64_t> {
      for (const pool::Lease& l : head->pool().Leases()) {
        if (l.id == lease) return {l.started_s, l.last_checkpoint_s};
      }
      return {-1, -1};
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (at_risk_since().second <= at_risk_since().first && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto [started, checkpointed] = at_risk_since();
    EXPECT_GE(checkpointed - started, 50) << "the snapshot moved the lease's last checkpoint";
    (*job)->ForgetCheckpoints("job-h-1.task-8");  // that task is done
    ASSERT_TRUE((*job)->Release(lease).ok());
    // Release is sent after the notes, in order: once the head has taken the lease back, it has
    // handled them.
    const auto released = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!head->pool().Leases().empty() && std::chrono::steady_clock::now() < released) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  head.reset();
  absl::StatusOr<std::unique_ptr<HeadJournal>> index = HeadJournal::Open(journal);
  ASSERT_TRUE(index.ok()) << index.status();
  absl::StatusOr<std::vector<CheckpointRecord>> kept = (*index)->CheckpointHistory("job-h-1.task-7");
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_EQ((*kept)[0].version, 3);
  EXPECT_EQ((*kept)[0].step, 120);
  EXPECT_EQ((*kept)[0].path, "/ckpt/job-h-1.task-7/snap-3");
  absl::StatusOr<std::vector<CheckpointRecord>> forgotten = (*index)->CheckpointHistory("job-h-1.task-8");
  ASSERT_TRUE(forgotten.ok()) << forgotten.status();
  EXPECT_TRUE(forgotten->empty()) << "a finished task's entries are removed";
  absl::StatusOr<std::vector<CheckpointRecord>> foreign = (*index)->CheckpointHistory("job-h-1.task-9");
  ASSERT_TRUE(foreign.ok());
  EXPECT_TRUE(foreign->empty()) << "a lease the job does not hold records nothing";
  index->reset();
  std::remove(journal.c_str());
}

}  // namespace
}  // namespace gpupool::runtime

namespace gpupool::runtime {
namespace {

// A head with a journal: one GPU of team owner, on 127.0.0.1:`port` (0: any).
std::unique_ptr<PoolServer> StartDurableHead(const std::string& journal, uint16_t port,
                                             std::chrono::milliseconds reclaim_window = std::chrono::seconds(30)) {
  EmbeddedPoolOptions po;
  po.simulate = "1xH100-80GB";
  po.config_text = kOwnerBorrowerConfig;
  PoolServerOptions so;
  so.port = port;
  so.team_tokens = {{"owner", "owner-token"}};
  so.journal_path = journal;
  so.reclaim_window = reclaim_window;
  return StartHead(po, so);
}

std::string TempJournal(const std::string& name) {
  std::string path = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid()) + ".db";
  std::remove(path.c_str());
  return path;
}

// The head restarts under a job that holds a lease: the new head takes the lease back from its
// journal, the job reclaims it when it reconnects, and its task never hears of a loss; the GPU is
// not given to anyone else meanwhile, and the lease is released normally afterwards.
TEST(PoolRpcRestart, ALeaseHeldThroughAHeadRestartIsReclaimedNotLost) {
  const std::string journal = TempJournal("reclaim");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  Recorder held, queued;
  auto job = RemotePool::Connect({.port = port, .team = "owner", .token = "owner-token",
                                  .reconnect_for = std::chrono::seconds(20)});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  const std::string lease = held.last_lease().id;
  ASSERT_TRUE((*job)->Request(Req("queued"), &queued).ok());  // the one GPU is taken: it waits

  head.reset();
  head = StartDurableHead(journal, port);
  ASSERT_NE(head, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*job)->reconnections() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*job)->reconnections(), 1u);
  std::vector<pool::Lease> leases = head->pool().Leases();
  ASSERT_EQ(leases.size(), 1u) << "the new head holds the lease for the job";
  EXPECT_EQ(leases[0].id, lease);
  // The queued request, sent again, still waits behind it: nobody else got the GPU.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const std::string& e : held.events()) EXPECT_EQ(e.rfind("lost", 0), std::string::npos) << e;
  EXPECT_FALSE(queued.WaitFor("granted", 1, std::chrono::milliseconds(1))) << "the held GPU was given away";

  // Released to the new head like any lease: the queued request gets the GPU.
  ASSERT_TRUE((*job)->Release(lease).ok());
  ASSERT_TRUE(queued.WaitFor("granted"));
  EXPECT_TRUE((*job)->Release(queued.last_lease().id).ok());
  job->reset();
  head.reset();
  std::remove(journal.c_str());
}

// Nobody reclaims the previous run's lease (its job did not reconnect): the new head releases it
// when the reclaim window ends, and its GPU is granted again.
TEST(PoolRpcRestart, ALeaseNobodyReclaimsIsReleasedAfterTheWindow) {
  const std::string journal = TempJournal("unclaimed");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  {
    Recorder held;
    auto job = RemotePool::Connect({.port = port, .team = "owner", .token = "owner-token"});
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
    ASSERT_TRUE(held.WaitFor("granted"));
    head.reset();  // the job does not reconnect (reconnect_for 0): it reports the lease lost
    ASSERT_TRUE(held.WaitFor("lost"));
  }
  head = StartDurableHead(journal, port, std::chrono::milliseconds(300));
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->pool().Leases().size(), 1u) << "kept for a while for its job";
  Recorder next;  // outlives the job
  auto job = RemotePool::Connect({.port = port, .team = "owner", .token = "owner-token"});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("next"), &next).ok());
  ASSERT_TRUE(next.WaitFor("granted")) << "the GPU came back when the window ended";
  EXPECT_TRUE((*job)->Release(next.last_lease().id).ok());
  job->reset();
  head.reset();
  absl::StatusOr<std::unique_ptr<HeadJournal>> opened = HeadJournal::Open(journal);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<std::vector<LedgerEntry>> ledger = (*opened)->Ledger(0, 1e12);
  ASSERT_TRUE(ledger.ok()) << ledger.status();
  std::vector<std::string> causes;
  for (const LedgerEntry& e : *ledger) causes.push_back(e.end_cause);
  EXPECT_THAT(causes, ::testing::Contains("not reclaimed by its job"));
  opened->reset();
  std::remove(journal.c_str());
}

}  // namespace
}  // namespace gpupool::runtime

namespace gpupool::runtime {
namespace {

// A network blip, not a restart: the job's connection drops while the head runs on. The head
// keeps the job's lease for its reclaim window instead of giving the GPU away, the job's task
// keeps running, and the job reclaims the lease when it reconnects.
TEST(PoolRpcRestart, ALeaseOutlivesALostConnectionAndIsReclaimed) {
  const std::string journal = TempJournal("blip");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  TcpProxy proxy(head->port());
  Recorder held, other_heard;
  auto job = RemotePool::Connect({.port = proxy.port(), .team = "owner", .token = "owner-token",
                                  .reconnect_for = std::chrono::seconds(20)});
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  const std::string lease = held.last_lease().id;
  // Another job of the same team asks for the one GPU: it must wait behind the kept lease.
  auto other = RemotePool::Connect({.port = head->port(), .team = "owner", .token = "owner-token",
                                    .reconnect_for = std::chrono::seconds(20)});
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->Request(Req("other"), &other_heard).ok());

  proxy.CutAll();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*job)->reconnections() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*job)->reconnections(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const std::string& e : held.events()) EXPECT_EQ(e.rfind("lost", 0), std::string::npos) << e;
  EXPECT_FALSE(other_heard.WaitFor("granted", 1, std::chrono::milliseconds(1)))
      << "the GPU of a job that was only cut off was given to another";
  ASSERT_TRUE((*job)->Release(lease).ok());  // on the new session, like any lease
  ASSERT_TRUE(other_heard.WaitFor("granted"));
  EXPECT_TRUE((*other)->Release(other_heard.last_lease().id).ok());
  job->reset();
  other->reset();
  head.reset();
  std::remove(journal.c_str());
}

// A job that ends says so: what it still holds goes back at once, not after the reclaim window.
TEST(PoolRpcRestart, AJobThatEndsGivesItsLeasesBackAtOnce) {
  const std::string journal = TempJournal("leave");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  Recorder held;
  {
    auto job = RemotePool::Connect({.port = head->port(), .team = "owner", .token = "owner-token",
                                    .reconnect_for = std::chrono::seconds(20)});
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
    ASSERT_TRUE(held.WaitFor("granted"));
  }  // ends holding the lease
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!head->pool().Leases().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(head->pool().Leases().empty()) << "kept for a reclaim that will not come";
  head.reset();
  std::remove(journal.c_str());
}

}  // namespace
}  // namespace gpupool::runtime

namespace gpupool::runtime {
namespace {

// Polls `done` every 10 ms for up to `timeout`.
template <typename Done>
bool Eventually(Done done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

RemotePoolOptions OwnerJob(uint16_t port) {
  return {.port = port, .team = "owner", .token = "owner-token", .reconnect_for = std::chrono::seconds(20)};
}

// The pool id of the one lease the head holds for request `client_id` of some job, or "".
std::string LeaseFor(PoolServer& head, const std::string& client_id) {
  for (const pool::Lease& l : head.pool().Leases()) {
    if (l.request.id.size() > client_id.size() &&
        l.request.id.compare(l.request.id.size() - client_id.size() - 1, std::string::npos, "/" + client_id) == 0) {
      return l.id;
    }
  }
  return "";
}

// A request accepted before a head restart keeps its place in the queue. The restarted head
// queues it again from its journal, for its job, and admits it while that job is still away,
// ahead of a request made after the restart; the job gets the lease when it is back.
TEST(PoolRpcRestart, AQueuedRequestKeepsItsPlaceThroughAHeadRestart) {
  const std::string journal = TempJournal("queued");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  TcpProxy proxy(port);  // the waiting job's way to the head
  Recorder held, early, late;
  auto holder = RemotePool::Connect(OwnerJob(port));
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_TRUE((*holder)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  auto waiter = RemotePool::Connect(OwnerJob(proxy.port()));
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  ASSERT_TRUE((*waiter)->Request(Req("early"), &early).ok());  // answered once durable

  head.reset();
  proxy.Refuse(true);  // the waiting job cannot get back yet
  head = StartDurableHead(journal, port);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->pool().pending_requests(), 1u) << "the restarted head forgot the accepted request";
  ASSERT_TRUE(Eventually([&] { return (*holder)->reconnections() == 1; }));
  auto newcomer = RemotePool::Connect(OwnerJob(port));
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  ASSERT_TRUE((*newcomer)->Request(Req("late"), &late).ok());
  ASSERT_TRUE((*holder)->Release(held.last_lease().id).ok());

  ASSERT_TRUE(Eventually([&] { return !LeaseFor(*head, "early").empty(); }))
      << "the GPU did not go to the request that was first";
  const std::string kept = LeaseFor(*head, "early");
  EXPECT_FALSE(late.WaitFor("granted", 1, std::chrono::milliseconds(200)));
  proxy.Refuse(false);
  ASSERT_TRUE(early.WaitFor("granted")) << "the job back did not hear of the grant made while it was away";
  EXPECT_EQ(early.last_lease().id, kept);
  EXPECT_EQ(early.last_lease().request.id, "early");
  ASSERT_TRUE((*waiter)->Release(kept).ok());
  ASSERT_TRUE(late.WaitFor("granted"));
  EXPECT_TRUE((*newcomer)->Release(late.last_lease().id).ok());
  waiter->reset();
  newcomer->reset();
  holder->reset();
  head.reset();
  std::remove(journal.c_str());
}

// A lost connection while the head runs on: the job's queued request is not withdrawn but kept,
// with its place, and admitted for the job while it is away.
TEST(PoolRpcRestart, AQueuedRequestOutlivesALostConnection) {
  const std::string journal = TempJournal("queued-blip");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  TcpProxy proxy(head->port());
  Recorder held, early, late;
  auto holder = RemotePool::Connect(OwnerJob(head->port()));
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_TRUE((*holder)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  auto waiter = RemotePool::Connect(OwnerJob(proxy.port()));
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  ASSERT_TRUE((*waiter)->Request(Req("early"), &early).ok());

  proxy.Refuse(true);
  proxy.CutAll();
  ASSERT_TRUE(Eventually([&] { return !(*waiter)->connected(); }));
  auto newcomer = RemotePool::Connect(OwnerJob(head->port()));
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  ASSERT_TRUE((*newcomer)->Request(Req("late"), &late).ok());
  ASSERT_TRUE((*holder)->Release(held.last_lease().id).ok());
  ASSERT_TRUE(Eventually([&] { return !LeaseFor(*head, "early").empty(); }))
      << "the request of the job cut off lost its place";
  EXPECT_FALSE(late.WaitFor("granted", 1, std::chrono::milliseconds(200)));

  proxy.Refuse(false);
  ASSERT_TRUE(early.WaitFor("granted"));
  EXPECT_EQ((*waiter)->reconnections(), 1u);
  ASSERT_TRUE((*waiter)->Release(early.last_lease().id).ok());
  ASSERT_TRUE(late.WaitFor("granted"));
  EXPECT_TRUE((*newcomer)->Release(late.last_lease().id).ok());
  waiter->reset();
  newcomer->reset();
  holder->reset();
  head.reset();
  std::remove(journal.c_str());
}

// What a job gave up while it was away (a lease released, a request withdrawn) goes back to the
// pool as soon as it reconnects, not when the reclaim window ends.
TEST(PoolRpcRestart, WhatAJobGaveUpWhileAwayGoesBackWhenItReturns) {
  const std::string journal = TempJournal("gave-up");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);  // a 30 s window
  ASSERT_NE(head, nullptr);
  TcpProxy proxy(head->port());
  Recorder held, early, late;
  auto job = RemotePool::Connect(OwnerJob(proxy.port()));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  ASSERT_TRUE((*job)->Request(Req("early"), &early).ok());

  proxy.Refuse(true);
  proxy.CutAll();
  ASSERT_TRUE(Eventually([&] { return !(*job)->connected(); }));
  ASSERT_TRUE((*job)->Release(held.last_lease().id).ok());
  ASSERT_TRUE((*job)->Withdraw("early").ok());
  auto newcomer = RemotePool::Connect(OwnerJob(head->port()));
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  ASSERT_TRUE((*newcomer)->Request(Req("late"), &late).ok());
  EXPECT_FALSE(late.WaitFor("granted", 1, std::chrono::milliseconds(300))) << "the lease was not kept for its job";

  proxy.Refuse(false);
  ASSERT_TRUE(late.WaitFor("granted", 1, std::chrono::seconds(10)))
      << "what the job gave up while away waited for the end of the window";
  EXPECT_EQ(head->pool().pending_requests(), 0u);
  EXPECT_FALSE(early.WaitFor("granted", 1, std::chrono::milliseconds(1)));
  EXPECT_TRUE((*newcomer)->Release(late.last_lease().id).ok());
  job->reset();
  newcomer->reset();
  head.reset();
  std::remove(journal.c_str());
}

// Nobody comes back for a request the previous run accepted: when the reclaim window ends it
// leaves the queue and the journal, and the next request gets the GPU.
TEST(PoolRpcRestart, ARequestNobodyReclaimsLeavesTheQueueAfterTheWindow) {
  const std::string journal = TempJournal("queued-unclaimed");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  TcpProxy proxy(port);
  Recorder held, early, next;
  auto job = RemotePool::Connect(OwnerJob(proxy.port()));  // never gets back
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  ASSERT_TRUE((*job)->Request(Req("early"), &early).ok());
  head.reset();
  proxy.Refuse(true);
  head = StartDurableHead(journal, port, std::chrono::milliseconds(300));
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->pool().pending_requests(), 1u);
  auto newcomer = RemotePool::Connect(OwnerJob(port));
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  ASSERT_TRUE((*newcomer)->Request(Req("next"), &next).ok());
  ASSERT_TRUE(next.WaitFor("granted", 1, std::chrono::seconds(10)));
  EXPECT_TRUE(LeaseFor(*head, "early").empty()) << "a request nobody reclaimed was admitted after its window";
  EXPECT_EQ(head->pool().pending_requests(), 0u);
  EXPECT_TRUE((*newcomer)->Release(next.last_lease().id).ok());
  newcomer->reset();
  head.reset();
  absl::StatusOr<std::unique_ptr<HeadJournal>> opened = HeadJournal::Open(journal);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<HeadState> state = (*opened)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(state->requests.empty());
  opened->reset();
  job->reset();
  std::remove(journal.c_str());
}

}  // namespace
}  // namespace gpupool::runtime

namespace gpupool::runtime {
namespace {

// A request admitted while its job is away, and then a second head restart before the job is
// back: the job, which still waits on the request, gets that lease when it returns.
TEST(PoolRpcRestart, AGrantMadeWhileAwayOutlivesAnotherRestart) {
  const std::string journal = TempJournal("granted-away");
  std::unique_ptr<PoolServer> head = StartDurableHead(journal, 0);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  TcpProxy proxy(port);
  Recorder held, early;
  auto holder = RemotePool::Connect(OwnerJob(port));
  ASSERT_TRUE(holder.ok()) << holder.status();
  ASSERT_TRUE((*holder)->Request(Req("held"), &held).ok());
  ASSERT_TRUE(held.WaitFor("granted"));
  auto waiter = RemotePool::Connect(OwnerJob(proxy.port()));
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  ASSERT_TRUE((*waiter)->Request(Req("early"), &early).ok());

  proxy.Refuse(true);
  proxy.CutAll();
  ASSERT_TRUE(Eventually([&] { return !(*waiter)->connected(); }));
  ASSERT_TRUE((*holder)->Release(held.last_lease().id).ok());
  ASSERT_TRUE(Eventually([&] { return !LeaseFor(*head, "early").empty(); }));
  const std::string kept = LeaseFor(*head, "early");

  head.reset();
  head = StartDurableHead(journal, port);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(LeaseFor(*head, "early"), kept) << "the restarted head did not take the lease back";
  proxy.Refuse(false);
  ASSERT_TRUE(early.WaitFor("granted")) << "the job back did not hear of the grant";
  EXPECT_EQ(early.last_lease().id, kept);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(LeaseFor(*head, "early"), kept) << "the lease was given back instead of to its job";
  ASSERT_TRUE((*waiter)->Release(kept).ok());
  waiter->reset();
  holder->reset();
  head.reset();
  std::remove(journal.c_str());
}

}  // namespace
}  // namespace gpupool::runtime
