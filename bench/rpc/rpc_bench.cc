// Lease round trip (request -> granted -> release) over loopback Cap'n Proto RPC (PoolServer +
// RemotePool), beside the same round trip on the in-process PoolService in the same run.
//   rpc_bench [--json] [--iterations=N] [--clients=K]
// Latency: one client, sequential round trips, p50/p99. Throughput: K clients at once, each on
// its own connection, on a pool of K simulated GPUs; lease operations/s counts request and
// release calls (two per round trip). Issue 6 targets: p50 <= 200 us, >= 20,000 lease ops/s.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/service/pool_service.h"
#include "runtime/service/pool_server.h"
#include "runtime/client/remote_pool.h"

namespace {

using namespace gpupool;
using namespace gpupool::runtime;
using Clock = std::chrono::steady_clock;

class Waiter : public LeaseListener {
 public:
  void OnGranted(const pool::Lease& lease) override {
    std::lock_guard<std::mutex> lock(mu_);
    lease_id_ = lease.id;
    cv_.notify_one();
  }
  void OnRevoked(const std::string&, pool::RevokeCause, double) override {}
  void OnLost(const std::string&, const std::string&) override {}
  void OnRequestFailed(const std::string& id, const absl::Status& why) override {
    std::fprintf(stderr, "rpc_bench: request %s refused: %s\n", id.c_str(), why.ToString().c_str());
    std::exit(1);
  }
  std::string Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !lease_id_.empty(); });
    std::string id;
    id.swap(lease_id_);
    return id;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string lease_id_;
};

[[noreturn]] void Die(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "rpc_bench: %s: %s\n", what, st.ToString().c_str());
  std::exit(1);
}

// Either pool: the same calls.
template <typename Pool>
std::vector<double> RoundTrips(Pool& pool, const std::string& tag, int n) {
  Waiter w;
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    pool::LeaseRequest r;
    r.id = tag + "-" + std::to_string(i);
    r.team = "bench";
    auto t0 = Clock::now();
    pool.Submit(r, &w);  // as the job runtime asks: a refusal would reach OnRequestFailed
    std::string lease = w.Wait();
    if (absl::Status st = pool.Release(lease); !st.ok()) Die("release", st);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

double Pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

std::unique_ptr<PoolService> NewPool(int gpus) {
  PoolServiceOptions o;
  o.pool.simulate = std::to_string(gpus) + "xH100-80GB";
  auto p = PoolService::Start(o);
  if (!p.ok()) {
    std::fprintf(stderr, "pool: %s\n", std::string(p.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(p);
}

void Print(bool json, const char* metric, double v, const char* unit, const char* ref, double rv) {
  if (json) {
    std::printf("{\"bench\": \"rpc\", \"metric\": \"%s\", \"value\": %.2f, \"unit\": \"%s\", "
                "\"reference\": \"%s\", \"reference_value\": %.2f}\n", metric, v, unit, ref, rv);
  } else {
    std::printf("%-28s %12.2f %-6s  %-30s %12.2f\n", metric, v, unit, ref, rv);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  int iterations = 20000, clients = 4;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strncmp(argv[i], "--iterations=", 13)) iterations = std::atoi(argv[i] + 13);
    else if (!std::strncmp(argv[i], "--clients=", 10)) clients = std::atoi(argv[i] + 10);
    else { std::fprintf(stderr, "rpc_bench: unknown flag %s\n", argv[i]); return 2; }
  }
  PoolServerOptions so;
  so.team_tokens = {{"bench", "t"}};

  // Latency, one client.
  auto embedded = NewPool(1);
  RoundTrips(*embedded, "warm", 1000);
  std::vector<double> base = RoundTrips(*embedded, "e", iterations);
  embedded.reset();
  auto server = PoolServer::Start(NewPool(1), so);
  if (!server.ok()) return 1;
  auto client = RemotePool::Connect({.port = (*server)->port(), .team = "bench", .token = "t"});
  if (!client.ok()) return 1;
  RoundTrips(**client, "warm", 1000);
  std::vector<double> rpc = RoundTrips(**client, "r", iterations);
  client->reset();
  server->reset();

  // Throughput, K clients at once.
  auto throughput = [&](auto&& make_pool_call) {
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) threads.emplace_back([&, c] { make_pool_call(c); });
    for (auto& t : threads) t.join();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return 2.0 * clients * iterations / s;  // request + release per round trip
  };
  auto pool_k = NewPool(clients);
  double base_ops = throughput([&](int c) { RoundTrips(*pool_k, "c" + std::to_string(c), iterations); });
  pool_k.reset();
  auto server_k = PoolServer::Start(NewPool(clients), so);
  if (!server_k.ok()) return 1;
  std::vector<std::unique_ptr<RemotePool>> remotes;
  for (int c = 0; c < clients; ++c) {
    auto r = RemotePool::Connect({.port = (*server_k)->port(), .team = "bench", .token = "t"});
    if (!r.ok()) return 1;
    remotes.push_back(*std::move(r));
  }
  double rpc_ops = throughput([&](int c) { RoundTrips(*remotes[c], "c" + std::to_string(c), iterations); });
  remotes.clear();
  server_k->reset();

  Print(json, "rpc_round_trip_p50_us", Pct(rpc, 0.5), "us", "embedded_round_trip_p50_us", Pct(base, 0.5));
  Print(json, "rpc_round_trip_p99_us", Pct(rpc, 0.99), "us", "embedded_round_trip_p99_us", Pct(base, 0.99));
  Print(json, "rpc_lease_ops_per_s", rpc_ops, "1/s", "embedded_lease_ops_per_s", base_ops);
  if (!json) {
    std::printf("(%d round trips per measurement; throughput with %d clients on %d GPUs; "
                "targets: p50 <= 200 us, >= 20000 lease ops/s)\n", iterations, clients, clients);
  }
  return 0;
}
