// Bad bytes on the head's port, shaped like the real protocol: a real job's session (bootstrap,
// authenticate, request, release, as Cap'n Proto frames) is recorded through a forwarding proxy,
// then replayed to the head hundreds of times with bytes flipped, ranges overwritten, chunks
// repeated or the stream cut short, while another job requests and releases leases throughout
// and a connection that sent half a frame is held open. The head must never crash (it runs in
// this process), every steady round must be served in time, and a new job must be served after.
//
// Bounded and deterministic: a fixed seed and a fixed number of rounds (a longer campaign:
// GPUPOOL_FUZZ_SEED=N GPUPOOL_FUZZ_ROUNDS=M); a failure prints the round and the mutation.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/agent/node_agent.h"
#include "runtime/client/remote_pool.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/tcp_proxy.h"
#include "tests/runtime/test_head.h"

namespace gpupool::runtime {
namespace {

// Team `steady` owns two of the four GPUs; team `fuzz` owns none and may borrow two, so whatever
// the replayed sessions get granted, steady's single-GPU requests fit without a reclaim.
constexpr char kFuzzConfig[] = R"(
model_groups:
  gpus: [H100-80GB]
priority_classes:
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
teams:
  - name: steady
    quotas: [{gpus: gpus, nominal: 2}]
  - name: fuzz
    quotas: [{gpus: gpus, nominal: 0, borrowing_limit: 2}]
)";

// Reads what the peer sends for up to `wait`, so the head gets to answer (and to act on) what it
// was sent before the connection closes.
void DrainFor(int fd, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  char buf[4096];
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1) <= 0) continue;
    if (::recv(fd, buf, sizeof buf, 0) <= 0) return;
  }
}

struct Xorshift {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

// One of four damages to a recorded session; `what` says which, for the failure message.
std::string Mutate(const std::string& good, Xorshift& rng, std::string* what) {
  std::string bad = good;
  switch (rng.Below(4)) {
    case 0: {  // a few bytes flipped anywhere: frame headers, pointers, lengths, text
      const size_t flips = 1 + rng.Below(8);
      for (size_t i = 0; i < flips; ++i) bad[rng.Below(bad.size())] ^= static_cast<char>(1 + rng.Below(255));
      *what = absl::StrCat(flips, " byte(s) flipped");
      break;
    }
    case 1: {  // a range overwritten with random bytes
      const size_t at = rng.Below(bad.size());
      const size_t n = std::min(bad.size() - at, 1 + rng.Below(64));
      for (size_t i = 0; i < n; ++i) bad[at + i] = static_cast<char>(rng.Next());
      *what = absl::StrCat(n, " bytes overwritten at ", at);
      break;
    }
    case 2: {  // a chunk repeated: messages replayed, frames misaligned
      const size_t at = rng.Below(bad.size());
      const size_t n = std::min(bad.size() - at, 1 + rng.Below(256));
      bad.insert(at + n, bad.substr(at, n));
      *what = absl::StrCat(n, " bytes at ", at, " repeated");
      break;
    }
    default: {  // cut short anywhere, mid-frame included
      const size_t keep = rng.Below(bad.size());
      bad.resize(keep);
      *what = absl::StrCat("cut to ", keep, " bytes");
      break;
    }
  }
  return bad;
}

// A job that keeps requesting and releasing one lease (on `node` when given) while the head is
// fed garbage; Stop says how it went.
class SteadyLeases {
 public:
  SteadyLeases(uint16_t port, std::string team, std::string token, std::string node = "") {
    thread_ = std::thread([this, port, team, token, node] {
      std::deque<Recorder> heard;  // one a round; they outlive the job, which may call them late
      auto job = RemotePool::Connect({.port = port, .team = team, .token = token});
      if (!job.ok()) return Fail(std::string(job.status().message()));
      for (int i = 0; running_.load() || i < 3; ++i) {
        const auto start = std::chrono::steady_clock::now();
        Recorder& r = heard.emplace_back();
        pool::LeaseRequest req = Req(absl::StrCat("steady-", i), team);
        if (!node.empty()) req.required_labels["node"] = node;
        if (absl::Status s = (*job)->Request(req, &r); !s.ok()) return Fail(absl::StrCat("round ", i, ": ", s.message()));
        if (!r.WaitFor("granted")) return Fail(absl::StrCat("round ", i, ": no grant within 20 s"));
        if (absl::Status s = (*job)->Release(r.last_lease().id); !s.ok()) {
          return Fail(absl::StrCat("round ", i, ": release: ", s.message()));
        }
        const int64_t ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
        slowest_ms_.store(std::max(slowest_ms_.load(), ms));
        rounds_.fetch_add(1);
      }
    });
  }
  ~SteadyLeases() { Stop(); }
  void Stop() {
    running_.store(false);
    if (thread_.joinable()) thread_.join();
  }
  std::string failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }
  int rounds() const { return rounds_.load(); }
  int64_t slowest_ms() const { return slowest_ms_.load(); }

 private:
  void Fail(std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = std::move(why);
  }
  std::atomic<bool> running_{true};
  std::atomic<int> rounds_{0};
  std::atomic<int64_t> slowest_ms_{0};
  std::mutex mu_;
  std::string failure_;  // guarded by mu_
  std::thread thread_;
};

// Replays `session` to the head on `port`, damaged, GPUPOOL_FUZZ_ROUNDS times (default
// `rounds`) from GPUPOOL_FUZZ_SEED (default fixed), with half a frame held open throughout.
// Fails the test naming the round and the damage as soon as `steady` reports a failure.
// `*played`: the rounds replayed.
void ReplayDamaged(uint16_t port, const std::string& session, int rounds, SteadyLeases& steady, int* played) {
  *played = 0;
  ASSERT_GT(session.size(), 64u) << "the recorded session is too short to be the real protocol";
  int half_open = ConnectLoopback(port);
  ASSERT_GE(half_open, 0);
  SendAll(half_open, session.data(), std::min<size_t>(session.size() / 2, 40));
  const char* seed_env = std::getenv("GPUPOOL_FUZZ_SEED");
  const char* rounds_env = std::getenv("GPUPOOL_FUZZ_ROUNDS");
  Xorshift rng{(seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 0x5eed0f00dULL) | 1};
  if (rounds_env != nullptr) rounds = std::atoi(rounds_env);
  for (int round = 0; round < rounds; ++round) {
    std::string what;
    std::string bad = Mutate(session, rng, &what);
    int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0) << "round " << round << " (" << what << "): the head stopped accepting connections";
    SendAll(fd, bad.data(), bad.size());
    DrainFor(fd, std::chrono::milliseconds(round % 4 == 0 ? 5 : 0));
    ::close(fd);
    ASSERT_TRUE(steady.failure().empty()) << "after round " << round << " (" << what << "): " << steady.failure();
    ++*played;
  }
  ::close(half_open);
}

TEST(PoolRpcFuzz, DamagedSessionsNeverCrashOrWedgeTheHead) {
  auto head = StartHead("4xH100-80GB", {{"steady", "steady-token-0123"}, {"fuzz", "fuzz-token-0123"}}, 0, kFuzzConfig);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();

  // A real session: connect, authenticate, a lease requested, granted and released, disconnect.
  std::string session;
  {
    TcpProxy proxy(port);
    auto job = RemotePool::Connect({.port = proxy.port(), .team = "fuzz", .token = "fuzz-token-0123"});
    ASSERT_TRUE(job.ok()) << job.status();
    Recorder r;
    ASSERT_TRUE((*job)->Request(Req("recorded", "fuzz"), &r).ok());
    ASSERT_TRUE(r.WaitFor("granted"));
    ASSERT_TRUE((*job)->Release(r.last_lease().id).ok());
    job->reset();
    session = proxy.recorded();
  }

  SteadyLeases steady(port, "steady", "steady-token-0123");
  int played = 0;
  ReplayDamaged(port, session, 2000, steady, &played);
  steady.Stop();

  // How deep the damage reached: sessions that still authenticated and got a lease granted.
  const uint64_t fuzz_leases = head->pool().Ledger()["fuzz"].leases;
  std::printf("recorded job session: %zu bytes; damaged replays of it granted %llu lease(s); steady rounds %d, "
              "slowest %lld ms\n",
              session.size(), static_cast<unsigned long long>(fuzz_leases) - 1, steady.rounds(),
              static_cast<long long>(steady.slowest_ms()));
  EXPECT_TRUE(steady.failure().empty()) << steady.failure();
  EXPECT_GE(steady.rounds(), 3);
  EXPECT_LT(steady.slowest_ms(), 5000) << "a steady round waited behind the garbage";
  // Every damaged connection reached the head (it accepts them on its own loop: wait for the last).
  const uint64_t expected = static_cast<uint64_t>(played) + 3;
  const auto accepted_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (head->connections_accepted() < expected && std::chrono::steady_clock::now() < accepted_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(head->connections_accepted(), expected);

  // A new job after all that: authenticated and served as on a fresh head.
  Recorder r;  // outlives the job
  auto after = RemotePool::Connect({.port = port, .team = "steady", .token = "steady-token-0123"});
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_TRUE((*after)->Request(Req("after-fuzz", "steady"), &r).ok());
  EXPECT_TRUE(r.WaitFor("granted"));
}

// The same for node agents: an agent's real session (registration with its node's inventory,
// heartbeats) replayed damaged, while node n0's agent and a job leasing on n0 carry on. After
// it, n1's agent registers and n1's GPUs are leased as if nothing happened.
TEST(PoolRpcFuzz, DamagedAgentSessionsNeverCrashOrWedgeTheHead) {
  PoolServiceOptions po;
  po.remote_nodes = {SimulatedNode("n0").nodes[0], SimulatedNode("n1").nodes[0]};
  PoolServerOptions so;
  so.team_tokens = {{"default", "team-token-0123"}};
  so.agent_token = "agent-token-0123";
  auto head = StartHead(po, so);
  ASSERT_NE(head, nullptr);
  const uint16_t port = head->port();
  auto n0 = NodeAgent::Start(NodeAgentOptions{.port = port, .token = "agent-token-0123", .node = SimulatedNode("n0"),
                                              .heartbeat_interval = std::chrono::milliseconds(50)});
  ASSERT_TRUE(n0.ok()) << n0.status();

  std::string session;
  {
    TcpProxy proxy(port);
    auto n1 = NodeAgent::Start(NodeAgentOptions{.port = proxy.port(), .token = "agent-token-0123",
                                                .node = SimulatedNode("n1"),
                                                .heartbeat_interval = std::chrono::milliseconds(10)});
    ASSERT_TRUE(n1.ok()) << n1.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a few heartbeats
    n1->reset();
    session = proxy.recorded();
  }

  SteadyLeases steady(port, "default", "team-token-0123", "n0");
  int played = 0;
  ReplayDamaged(port, session, 1000, steady, &played);
  steady.Stop();
  std::printf("recorded agent session: %zu bytes; steady rounds %d, slowest %lld ms\n", session.size(),
              steady.rounds(), static_cast<long long>(steady.slowest_ms()));
  EXPECT_TRUE(steady.failure().empty()) << steady.failure();
  EXPECT_GE(steady.rounds(), 3);
  EXPECT_LT(steady.slowest_ms(), 5000);

  auto n1 = NodeAgent::Start(NodeAgentOptions{.port = port, .token = "agent-token-0123", .node = SimulatedNode("n1"),
                                              .heartbeat_interval = std::chrono::milliseconds(50)});
  ASSERT_TRUE(n1.ok()) << n1.status();
  Recorder r;  // outlives the job
  auto job = RemotePool::Connect({.port = port, .team = "default", .token = "team-token-0123"});
  ASSERT_TRUE(job.ok()) << job.status();
  pool::LeaseRequest on_n1 = Req("after-fuzz", "default");
  on_n1.required_labels["node"] = "n1";
  ASSERT_TRUE((*job)->Request(on_n1, &r).ok());
  EXPECT_TRUE(r.WaitFor("granted"));
}

}  // namespace
}  // namespace gpupool::runtime
