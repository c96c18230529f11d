// Scheduler speed on a large pool: 1,250 nodes x 8 H100 (10,000 GPUs), 100,000 pending requests
// of mixed shapes from 10 teams with quotas. A decision is one request placed or found
// unplaceable for now; the two are reported apart (a placed decision runs the placement policy,
// an unplaceable one is mostly answered from the scheduler's memo). Reports decisions/s, p50/p99
// per decision and the scheduler's memory for the head's default (the gpupool placement policy),
// and from the same run the scheduler's own packing rule and the first-fit baseline.
//
//   bench/run scheduler [--json]     (or build/bench/scheduler/scheduler_bench [--json])
//   bench/run scheduler --large      the 100k-GPU row: 12,500 nodes (100,000 GPUs), 1,000,000
//                                    pending; the default policy beside the packing rule (first-fit,
//                                    ~100x slower per decision at this size, would take hours)
//   scheduler_bench --digest         also prints a digest of every decision (grants with their
//                                    GPUs, revocations, wait reasons): a change to the scheduler's
//                                    internals that must not change decisions keeps it equal
//                                    (the digest is taken inside the timed cycles: quote the
//                                    figures of a run without it).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "bench/common/json_figure.h"
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {
namespace {

int kNodes = 1250;
constexpr int kTeams = 10;
int kRequests = 100000;

long MaxRssKib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

std::string Config() {
  std::string yaml = absl::StrCat("nodes:\n  - {name: n, count: ", kNodes,
                                  ", gpus: [{model: H100-80GB, count: 8}]}\nteams:\n");
  for (int t = 0; t < kTeams; ++t) {
    absl::StrAppend(&yaml, "  - {name: team", t, ", quotas: [{gpus: H100-80GB, nominal: ",
                    kNodes * 8 / kTeams, "}]}\n");
  }
  return yaml;
}

// Mixed shapes, as a shared pool sees them: singles, fractions, same-node gangs of 2/4/8.
LeaseRequest MakeRequest(int i, std::mt19937_64& rng) {
  LeaseRequest r;
  r.id = absl::StrCat("r", i);
  r.team = absl::StrCat("team", i % kTeams);
  uint64_t pick = rng() % 100;
  static const char* kClasses[] = {"training", "experiment", "experiment"};
  r.priority_class = kClasses[rng() % 3];
  if (pick < 35) {
    r.slot_count = 1;
  } else if (pick < 55) {
    r.slot = SlotShape::Fraction(pick % 2 ? 20000 : 40000, pick % 2 ? 250 : 500);
  } else if (pick < 75) {
    r.slot_count = 2;
    r.topology = GangTopology::kSameNode;
  } else if (pick < 90) {
    r.slot_count = 4;
    r.topology = GangTopology::kSameNode;
  } else {
    r.slot_count = 8;
    r.topology = GangTopology::kSameNvLinkIsland;
  }
  if (rng() % 4 == 0) r.runtime_estimate_s = 600 + static_cast<int64_t>(rng() % 7200);
  return r;
}

struct Figures {
  double decisions_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double placed_per_s = 0;       // placed decisions over the time they took
  double placed_p50_us = 0;
  double placed_p99_us = 0;
  double unplaceable_per_s = 0;  // unplaceable decisions over the time they took
  double unplaceable_p50_us = 0;
  double unplaceable_p99_us = 0;
  size_t placed = 0;
  size_t unplaceable = 0;
  double memory_mib = 0;
  size_t granted = 0;
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the decisions
};

bool print_digest = false;

void Digest(Figures& f, const std::string& text) {
  for (char c : text) {
    f.digest ^= static_cast<unsigned char>(c);
    f.digest *= 1099511628211ull;
  }
}

void DigestCycle(Figures& f, const Scheduler& scheduler, const CycleResult& result) {
  for (const std::string& id : result.granted) {
    Digest(f, absl::StrCat("g:", id));
    for (const GpuRef& gpu : scheduler.leases().at(id).gpus) Digest(f, absl::StrCat(gpu.node, "/", gpu.index));
  }
  for (const Revocation& r : result.revoked) Digest(f, absl::StrCat("r:", r.lease_id, ">", r.for_request));
  for (const std::string& id : result.expired) Digest(f, absl::StrCat("x:", id));
  for (const PendingInfo& p : scheduler.Pending()) {
    Digest(f, absl::StrCat("p:", p.request_id, "=", WaitReasonName(p.reason)));
  }
}

struct Setting {
  const char* label;
  const char* placement_policy;
  bool first_fit;
};

// Rate, p50 and p99 of a set of decision durations (ns).
void Summarise(std::vector<int64_t> nanos, double* per_s, double* p50_us, double* p99_us) {
  if (nanos.empty()) return;
  std::sort(nanos.begin(), nanos.end());
  double total = 0;
  for (int64_t n : nanos) total += static_cast<double>(n);
  *per_s = static_cast<double>(nanos.size()) / (total / 1e9);
  *p50_us = static_cast<double>(nanos[nanos.size() / 2]) / 1000.0;
  *p99_us = static_cast<double>(nanos[nanos.size() * 99 / 100]) / 1000.0;
}

Figures Run(const Setting& setting) {
  long rss_before = MaxRssKib();  // the process's start-up footprint
  PoolConfig config = ParsePoolConfig(Config(), "bench").value();
  auto driver = SimulatedDriver::Create(*config.simulated_nodes).value();
  Inventory inventory = Inventory::FromDiscovery(driver->Discover().value()).value();
  std::vector<int64_t> nanos;
  std::vector<char> placed;
  nanos.reserve(3 * kRequests);
  placed.reserve(3 * kRequests);
  Scheduler scheduler(inventory, config.scheduling,
                      {.placement_policy = setting.placement_policy, .first_fit = setting.first_fit,
                       .decision_nanos = &nanos, .decision_placed = &placed});
  std::mt19937_64 rng(42);
  for (int i = 0; i < kRequests; ++i) {
    if (!scheduler.Submit(MakeRequest(i, rng), 0).ok()) std::abort();
  }
  auto t0 = std::chrono::steady_clock::now();
  Figures f;
  CycleResult first = scheduler.Schedule(0);
  f.granted += first.granted.size();
  if (print_digest) DigestCycle(f, scheduler, first);
  // Steady state: a tenth of the leases end, and the whole queue is considered again.
  for (int cycle = 1; cycle <= 2; ++cycle) {
    std::vector<std::string> ending;
    int n = 0;
    for (const auto& [id, lease] : scheduler.leases()) {
      if (n++ % 10 == 0) ending.push_back(id);
    }
    for (const std::string& id : ending) (void)scheduler.Release(id, cycle * 60);
    CycleResult next = scheduler.Schedule(cycle * 60);
    f.granted += next.granted.size();
    if (print_digest) DigestCycle(f, scheduler, next);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.decisions_per_s = static_cast<double>(nanos.size()) / seconds;
  std::vector<int64_t> placed_nanos, unplaceable_nanos;
  for (size_t i = 0; i < nanos.size(); ++i) (placed[i] ? placed_nanos : unplaceable_nanos).push_back(nanos[i]);
  f.placed = placed_nanos.size();
  f.unplaceable = unplaceable_nanos.size();
  Summarise(placed_nanos, &f.placed_per_s, &f.placed_p50_us, &f.placed_p99_us);
  Summarise(unplaceable_nanos, &f.unplaceable_per_s, &f.unplaceable_p50_us, &f.unplaceable_p99_us);
  std::sort(nanos.begin(), nanos.end());
  f.p50_us = static_cast<double>(nanos[nanos.size() / 2]) / 1000.0;
  f.p99_us = static_cast<double>(nanos[nanos.size() * 99 / 100]) / 1000.0;
  f.memory_mib = static_cast<double>(MaxRssKib() - rss_before) / 1024.0;
  return f;
}

// Runs one policy in a child process, so each gets its own peak-memory figure (ru_maxrss is a
// high-water mark: a second run in the same process would reuse the first one's memory).
Figures RunIsolated(const Setting& setting) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t child = fork();
  if (child == 0) {
    Figures f = Run(setting);
    ssize_t written = write(fds[1], &f, sizeof(f));
    _exit(written == sizeof(f) ? 0 : 1);
  }
  Figures f;
  ssize_t got = read(fds[0], &f, sizeof(f));
  int status = 0;
  waitpid(child, &status, 0);
  if (got != sizeof(f) || status != 0) std::abort();
  close(fds[0]);
  close(fds[1]);
  return f;
}

}  // namespace
}  // namespace gpupool::pool

int main(int argc, char** argv) {
  bool json = false;
  bool large = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json = true;
    if (std::strcmp(argv[i], "--digest") == 0) gpupool::pool::print_digest = true;
    if (std::strcmp(argv[i], "--large") == 0) {
      large = true;
      gpupool::pool::kNodes = 12500;
      gpupool::pool::kRequests = 1000000;
    }
    if (std::strncmp(argv[i], "--scale=", 8) == 0) {  // e.g. --scale=0.1 for a quick look
      double scale = std::atof(argv[i] + 8);
      gpupool::pool::kNodes = std::max(1, static_cast<int>(gpupool::pool::kNodes * scale));
      gpupool::pool::kRequests = std::max(1, static_cast<int>(gpupool::pool::kRequests * scale));
    }
  }
  using gpupool::pool::Figures;
  std::fprintf(stderr, "scheduler bench: %d GPUs, %d pending requests, 3 cycles per policy...\n",
               gpupool::pool::kNodes * 8, gpupool::pool::kRequests);
  using gpupool::pool::Setting;
  std::vector<Setting> settings = {{"gpupool (default)", "gpupool", false},
                                    {"packing", "packing", false},
                                    {"first-fit", "packing", true}};
  if (large) settings.pop_back();
  std::vector<Figures> figures;
  for (const Setting& s : settings) {
    auto start = std::chrono::steady_clock::now();
    figures.push_back(gpupool::pool::RunIsolated(s));
    std::fprintf(stderr, "  %s: done in %.0f s\n", s.label,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const Figures& ours = figures[0];
  const Figures& baseline = figures.back();
  const char* baseline_name = large ? "packing" : "first-fit";
  if (gpupool::pool::print_digest) {
    std::fprintf(stderr, "decision digest:");
    for (size_t i = 0; i < settings.size(); ++i) {
      std::fprintf(stderr, "%s %s %016llx", i == 0 ? "" : ",", settings[i].placement_policy == std::string("gpupool")
                                                                    ? "default"
                                                                    : settings[i].first_fit ? "first-fit" : "packing",
                   static_cast<unsigned long long>(figures[i].digest));
    }
    std::fprintf(stderr, "\n");
  }
  if (json) {
    auto line = [&](const char* metric, double value, const char* unit, double ref) {
      gpupool::bench::PrintJsonFigure("scheduler", metric, value, unit, baseline_name, ref);
    };
    line("decisions_per_s", ours.decisions_per_s, "1/s", baseline.decisions_per_s);
    line("placed_decisions_per_s", ours.placed_per_s, "1/s", baseline.placed_per_s);
    line("placed_decision_p99", ours.placed_p99_us, "us", baseline.placed_p99_us);
    line("unplaceable_decisions_per_s", ours.unplaceable_per_s, "1/s", baseline.unplaceable_per_s);
    line("unplaceable_decision_p99", ours.unplaceable_p99_us, "us", baseline.unplaceable_p99_us);
    line("decision_p50", ours.p50_us, "us", baseline.p50_us);
    line("decision_p99", ours.p99_us, "us", baseline.p99_us);
    line("memory", ours.memory_mib, "MiB", baseline.memory_mib);
    return 0;
  }
  std::printf("%d GPUs, %d pending requests, 3 cycles\n", gpupool::pool::kNodes * 8, gpupool::pool::kRequests);
  std::printf("%-30s", "");
  for (const Setting& s : settings) std::printf(" %18s", s.label);
  std::printf("   target\n");
  auto row = [&](const char* name, auto get, const char* format, const char* target) {
    std::printf("%-30s", name);
    for (const Figures& f : figures) std::printf(format, get(f));
    std::printf("   %s\n", target);
  };
  row("decisions/s (all)", [](const Figures& f) { return f.decisions_per_s; }, " %18.0f", "");
  row("placed decisions", [](const Figures& f) { return static_cast<double>(f.placed); }, " %18.0f", "");
  row("placed decisions/s", [](const Figures& f) { return f.placed_per_s; }, " %18.0f", ">= 100,000");
  row("placed p50 (us)", [](const Figures& f) { return f.placed_p50_us; }, " %18.1f", "");
  row("placed p99 (us)", [](const Figures& f) { return f.placed_p99_us; }, " %18.1f", "<= 1,000");
  row("unplaceable decisions", [](const Figures& f) { return static_cast<double>(f.unplaceable); }, " %18.0f", "");
  row("unplaceable decisions/s", [](const Figures& f) { return f.unplaceable_per_s; }, " %18.0f", "");
  row("unplaceable p99 (us)", [](const Figures& f) { return f.unplaceable_p99_us; }, " %18.1f", "");
  row("memory (MiB)", [](const Figures& f) { return f.memory_mib; }, " %18.0f", "<= 4,096 at 100k GPUs");
  row("leases granted", [](const Figures& f) { return static_cast<double>(f.granted); }, " %18.0f", "");
  return 0;
}
