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
#include "runtime/service/pool_service.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_server.h"
#include "runtime/client/remote_pool.h"
#include "tests/runtime/lease_recorder.h"
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

// Where this process reaches the head from: the address its workers' nodes are told to reach it
// by (a host name may resolve to 127.0.1.1 or to nothing there). Here, loopback.
TEST_F(PoolRpc, AJobKnowsItsOwnAddressOnTheConnection) {
  auto job = Connect("owner");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->LocalHost(), "127.0.0.1");
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
  PoolServiceOptions po;
  po.pool.simulate = "1xH100-80GB";
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
  for (const char* suffix : {"", "-wal", "-shm", "-journal", "-lock"}) {
    std::remove((journal + suffix).c_str());
  }
}

}  // namespace
}  // namespace gpupool::runtime
