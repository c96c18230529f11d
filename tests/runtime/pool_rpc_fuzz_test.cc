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
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/head/remote_pool.h"
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
  ASSERT_GT(session.size(), 64u) << "the recorded session is too short to be the real protocol";

  // A job that keeps working while the head is fed garbage.
  std::atomic<bool> fuzzing{true};
  std::atomic<int> steady_rounds{0};
  std::atomic<int64_t> slowest_ms{0};
  std::string steady_failure;
  std::thread steady([&] {
    auto job = RemotePool::Connect({.port = port, .team = "steady", .token = "steady-token-0123"});
    if (!job.ok()) {
      steady_failure = std::string(job.status().message());
      return;
    }
    for (int i = 0; fuzzing.load() || i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      Recorder r;
      if (absl::Status s = (*job)->Request(Req(absl::StrCat("steady-", i), "steady"), &r); !s.ok()) {
        steady_failure = absl::StrCat("round ", i, ": ", s.message());
        return;
      }
      if (!r.WaitFor("granted")) {
        steady_failure = absl::StrCat("round ", i, ": no grant within 20 s");
        return;
      }
      if (absl::Status s = (*job)->Release(r.last_lease().id); !s.ok()) {
        steady_failure = absl::StrCat("round ", i, ": release: ", s.message());
        return;
      }
      const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      slowest_ms.store(std::max(slowest_ms.load(), ms));
      steady_rounds.fetch_add(1);
    }
  });

  // Half a frame, held open for the whole run: the head must not wait on it.
  int half_open = ConnectLoopback(port);
  ASSERT_GE(half_open, 0);
  SendAll(half_open, session.data(), std::min<size_t>(session.size() / 2, 40));

  const char* seed_env = std::getenv("GPUPOOL_FUZZ_SEED");
  const char* rounds_env = std::getenv("GPUPOOL_FUZZ_ROUNDS");
  const uint64_t seed = seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 0x5eed0f00dULL;
  const int kRounds = rounds_env != nullptr ? std::atoi(rounds_env) : 2000;
  Xorshift rng{seed | 1};
  for (int round = 0; round < kRounds; ++round) {
    std::string what;
    std::string bad = Mutate(session, rng, &what);
    int fd = ConnectLoopback(port);
    ASSERT_GE(fd, 0) << "round " << round << " (" << what << "): the head stopped accepting connections";
    SendAll(fd, bad.data(), bad.size());
    DrainFor(fd, std::chrono::milliseconds(round % 4 == 0 ? 5 : 0));
    ::close(fd);
    ASSERT_TRUE(steady_failure.empty()) << "after round " << round << " (" << what << "): " << steady_failure;
  }
  fuzzing.store(false);
  steady.join();
  ::close(half_open);

  // How deep the damage reached: sessions that still authenticated and got a lease granted.
  const uint64_t fuzz_leases = head->pool().Ledger()["fuzz"].leases;
  std::printf("recorded session: %zu bytes; %d damaged replays, %llu of them granted a lease; "
              "steady rounds %d, slowest %lld ms\n",
              session.size(), kRounds, static_cast<unsigned long long>(fuzz_leases) - 1, steady_rounds.load(),
              static_cast<long long>(slowest_ms.load()));
  EXPECT_TRUE(steady_failure.empty()) << steady_failure;
  EXPECT_GE(steady_rounds.load(), 3);
  EXPECT_LT(slowest_ms.load(), 5000) << "a steady round waited behind the garbage";
  EXPECT_GE(head->connections_accepted(), static_cast<uint64_t>(kRounds) + 3);

  // A new job after all that: authenticated and served as on a fresh head.
  auto after = RemotePool::Connect({.port = port, .team = "steady", .token = "steady-token-0123"});
  ASSERT_TRUE(after.ok()) << after.status();
  Recorder r;
  ASSERT_TRUE((*after)->Request(Req("after-fuzz", "steady"), &r).ok());
  EXPECT_TRUE(r.WaitFor("granted"));
}

}  // namespace
}  // namespace gpupool::runtime
