// bench/run metrics: what a /metrics scrape costs on a large pool (issue 23's target: at most
// 100 ms at 10,000 GPUs, 200 teams and 100,000 pending requests). An in-process PoolService over
// simulated nodes, filled with leases and then a queue; each scrape is PoolService::Snapshot (the
// copy under the pool's lock) plus RenderHeadMetrics (the text, outside it). References measured
// in the same run: one scheduling cycle over the same queue (what the pool's thread does anyway)
// and a copy of the pending list (what `gpupool queue` costs).
//
//   metrics_bench [--json] [--nodes 1250] [--teams 200] [--pending 100000] [--cycles 5]
// Then the scheduling cycle's p99 (one release and one grant per cycle) while nothing scrapes,
// and while a scraper thread takes a snapshot every second. With 100,000 requests queued every
// cycle looks at all of them (seconds each), hence few cycles by default.
#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/json_figure.h"
#include "runtime/service/head_auth.h"
#include "runtime/service/metrics/head_metrics.h"
#include "runtime/service/pool_service.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Quiet : gpupool::runtime::LeaseListener {
  void OnGranted(const gpupool::pool::Lease&) override {}
  void OnRevoked(const std::string&, gpupool::pool::RevokeCause, double) override {}
  void OnLost(const std::string&, const std::string&) override {}
  void OnRequestFailed(const std::string&, const absl::Status&) override {}
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

template <typename F>
double MedianMs(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    f();
    t.push_back(Ms(Clock::now() - start));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpupool::runtime;
  bool json = false;
  int nodes = 1250, teams = 200, pending = 100000, cycle_count = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    if (!std::strcmp(argv[i], "--nodes") && i + 1 < argc) nodes = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--teams") && i + 1 < argc) teams = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--pending") && i + 1 < argc) pending = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--cycles") && i + 1 < argc) cycle_count = std::max(1, std::atoi(argv[++i]));
  }
  const int gpus = nodes * 8;
  std::string config = "teams:\n";
  for (int t = 0; t < teams; ++t) {
    absl::StrAppend(&config, "  - name: t", t, "\n    quotas: [{gpus: H100-80GB, nominal: ", gpus / teams,
                    "}]\n");
  }
  PoolServiceOptions o;
  o.pool.simulate = "8xH100-80GB";
  o.pool.node_count = nodes;
  o.config_text = config;
  auto pool = PoolService::Start(o);
  if (!pool.ok()) {
    std::fprintf(stderr, "metrics_bench: %s\n", std::string(pool.status().message()).c_str());
    return 1;
  }
  (*pool)->OwnerSchedules();  // this thread runs the cycles, so they can be timed
  Quiet quiet;
  auto submit = [&](int i) {
    gpupool::pool::LeaseRequest r;
    r.id = absl::StrCat("job-", i, "/r");
    r.team = absl::StrCat("t", i % teams);
    r.project = absl::StrCat("p", i % 37);
    r.workload_class = i % 3 ? "training" : "inference";
    (void)(*pool)->Request(r, &quiet);
  };
  auto fill_start = Clock::now();
  for (int i = 0; i < gpus; ++i) submit(i);  // one lease per GPU: the pool is full
  (*pool)->ScheduleNow();
  for (int i = gpus; i < gpus + pending; ++i) submit(i);
  double first_cycle_ms = MedianMs(1, [&] { (*pool)->ScheduleNow(); });
  double fill_s = std::chrono::duration<double>(Clock::now() - fill_start).count();

  const Viewer ops = Viewer::Operator();
  size_t bytes = 0;
  double snapshot_ms = MedianMs(5, [&] { (void)(*pool)->Snapshot(); });
  double scrape_ms = MedianMs(5, [&] { bytes = RenderHeadMetrics((*pool)->Snapshot(), ops).size(); });
  double team_scrape_ms = MedianMs(5, [&] { (void)RenderHeadMetrics((*pool)->Snapshot(), Viewer::Team("t7")); });
  double pending_copy_ms = MedianMs(5, [&] { (void)(*pool)->Pending(); });

  std::fflush(stdout);
  // The scheduler's cycles while nobody scrapes, then while a scraper takes a snapshot every
  // second (its copy holds the pool's lock): a cycle is one release and one grant, as a busy pool
  // makes them. p99 of each, same run.
  int next = gpus + pending;
  auto cycles = [&](int count) {
    std::vector<double> ms;
    for (int i = 0; i < count; ++i) {
      std::vector<gpupool::pool::Lease> held = (*pool)->Leases();
      if (!held.empty()) (void)(*pool)->Release(held[static_cast<size_t>(i) % held.size()].id);
      submit(next++);
      auto start = Clock::now();
      (*pool)->ScheduleNow();
      ms.push_back(Ms(Clock::now() - start));
    }
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<size_t>(0.99 * ms.size()))];
  };
  const int kCycles = cycle_count;
  double quiet_p99 = cycles(kCycles);
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load()) {
      (void)RenderHeadMetrics((*pool)->Snapshot(), ops);
      for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  double scraped_p99 = cycles(kCycles);
  stop = true;
  scraper.join();

  if (json) {
    using gpupool::bench::PrintJsonFigure;
    PrintJsonFigure("metrics", "scrape_ms", scrape_ms, "ms", "scheduling_cycle_ms", first_cycle_ms);
    PrintJsonFigure("metrics", "snapshot_under_lock_ms", snapshot_ms, "ms", "pending_list_copy_ms", pending_copy_ms);
    PrintJsonFigure("metrics", "team_scrape_ms", team_scrape_ms, "ms", "scrape_ms", scrape_ms);
    PrintJsonFigure("metrics", "cycle_p99_ms_scraped_every_second", scraped_p99, "ms", "cycle_p99_ms_unscraped", quiet_p99);
  } else {
    std::printf("metrics: %d GPUs (%d nodes), %d teams, %zu leases, %zu pending; filled in %.1f s\n", gpus, nodes,
                teams, (*pool)->Leases().size(), (*pool)->pending_requests(), fill_s);
    std::printf("  scrape (snapshot + text, %zu bytes)   %8.2f ms   (target <= 100 ms)\n", bytes, scrape_ms);
    std::printf("    of which the snapshot, under the lock %6.2f ms\n", snapshot_ms);
    std::printf("  a team's scrape                         %8.2f ms\n", team_scrape_ms);
    std::printf("  reference: one scheduling cycle         %8.2f ms\n", first_cycle_ms);
    std::printf("  reference: copying the pending list     %8.2f ms\n", pending_copy_ms);
    std::printf("  cycle p99 (%d cycles) scraped every 1 s %8.2f ms   (reference: not scraped %.2f ms)\n", cycle_count,
                scraped_p99, quiet_p99);
  }
  return 0;
}
