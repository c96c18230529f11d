// Pooled versus dedicated on the generated multi-team workload: the same jobs run through the
// same scheduler twice, once with each team confined to its nominal quota (dedicated GPUs) and
// once sharing (borrowing, reclaim with preemption, checkpoints). Issue 3's target: pooled
// utilisation at least 2.5x dedicated's, guaranteed requests admitted within one grace period.
//
// Beside the ratio it prints its ceiling: the offered load (work asked for / capacity) over
// dedicated's utilisation, what the ratio would be if the pool ran every GPU-hour anyone asked
// for. Pooled utilisation cannot exceed the offered load, so no scheduler beats that ceiling.
//
//   bench/run teams [--json] [--weeks=N] [--seeds=A-B] [--teams=N] [--burst=F]
//                   [--sprint-probability=P] [--patient] [--no-moves] [--placement-policy=NAME]
//   --no-moves: the scheduler does not defragment (move leases) for guaranteed requests
//   bench/run teams --sweep [--seeds=A-B]   the ratio over teams, burstiness and sprint frequency
//   bench/run teams --urgent [--seeds=A-B] [--weeks=N] [--urgent-per-day=R]
//     issue 24's spare reserve: the same workload plus urgent one-GPU work from every team, on
//     the teams pool plus a 4-GPU node no nominal quota covers, with a reserve of 0 (the
//     same-run baseline), 1, 2 and 4 GPUs for the urgent class: the urgent work's time to
//     admission against the utilisation the reserve costs.
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

#include "bench/common/json_figure.h"
#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "pool/sim/lease_simulation.h"
#include "pool/sim/seed_list.h"

using namespace gpupool::pool;

namespace {

struct Setting {
  int teams = sim::kDefaultTeams;
  sim::TeamWorkloadOptions workload;
  SchedulerOptions scheduler;
};

// Both runs of one setting, summed over seeds (means are taken when printed).
struct Comparison {
  int seeds = 0;
  sim::LeaseSimulationResult dedicated, pooled;  // sums of the per-seed figures
  double worst_within_grace = 1;                  // pooled, over seeds
  int late_grants = 0;                            // pooled: guaranteed requests past grace, all seeds
  int dedicated_late_grants = 0;
  double max_guaranteed_delay_s = 0;              // pooled, over seeds
  double ratio_min = 1e9, ratio_max = 0;          // per-seed pooled/dedicated
};

// GPU-hours left idle while a waiting request fit them, over the GPU-hours of capacity, from sums
// over `seeds` runs of one pool and horizon.
double IdleWhileFitShare(const sim::LeaseSimulationResult& sum, double seeds) {
  const double capacity = (sum.capacity_gpus / seeds) * sum.horizon_hours;
  return capacity > 0 ? sum.idle_while_fitting_work_waited_gpu_hours / capacity : 0;
}

void Accumulate(sim::LeaseSimulationResult& sum, const sim::LeaseSimulationResult& r) {
  sum.offered_load += r.offered_load;
  sum.mean_utilisation += r.mean_utilisation;
  sum.held_utilisation += r.held_utilisation;
  sum.idle_while_waiting_gpu_hours += r.idle_while_waiting_gpu_hours;
  sum.idle_while_fitting_work_waited_gpu_hours += r.idle_while_fitting_work_waited_gpu_hours;
  sum.capacity_gpus += r.capacity_gpus;
  sum.horizon_hours += r.horizon_hours;
  sum.guaranteed_requests += r.guaranteed_requests;
  sum.guaranteed_delay_mean_s += r.guaranteed_delay_mean_s;
  sum.guaranteed_delay_p95_s += r.guaranteed_delay_p95_s;
  sum.guaranteed_within_grace += r.guaranteed_within_grace;
  sum.burst_gpu_hours_per_sprint_week += r.burst_gpu_hours_per_sprint_week;
  sum.lost_gpu_hours += r.lost_gpu_hours;
  sum.restart_gpu_hours += r.restart_gpu_hours;
  sum.preemptions += r.preemptions;
  sum.moves += r.moves;
  sum.preemption_loops += r.preemption_loops;
  sum.jain_fairness += r.jain_fairness;
  sum.jobs_completed += r.jobs_completed;
  sum.jobs_abandoned += r.jobs_abandoned;
}

Comparison Compare(const Setting& setting, const std::vector<uint64_t>& seeds, bool quiet) {
  PoolConfig config = ParsePoolConfig(sim::TeamsPoolYaml(setting.teams), "teams-bench").value();
  auto driver = SimulatedDriver::Create(*config.simulated_nodes).value();
  Inventory inventory = Inventory::FromDiscovery(driver->Discover().value()).value();
  Comparison c;
  for (uint64_t seed : seeds) {
    sim::TeamWorkloadOptions workload = setting.workload;
    workload.seed = seed;
    std::vector<sim::SimJob> jobs = sim::GenerateTeamWorkload(config.scheduling, "H100-80GB", workload);
    sim::LeaseSimulationResult d =
        sim::SimulateLeases(inventory, config.scheduling, jobs, {.pooled = false, .scheduler = setting.scheduler});
    sim::LeaseSimulationResult p =
        sim::SimulateLeases(inventory, config.scheduling, jobs, {.pooled = true, .scheduler = setting.scheduler});
    double ratio = p.mean_utilisation / d.mean_utilisation;
    if (!quiet) {
      std::fprintf(stderr, "  seed %llu: %zu jobs, offered %.1f%%, dedicated %.1f%%, pooled %.1f%% (%.2fx)\n",
                   static_cast<unsigned long long>(seed), jobs.size(), 100 * p.offered_load,
                   100 * d.mean_utilisation, 100 * p.mean_utilisation, ratio);
    }
    ++c.seeds;
    Accumulate(c.dedicated, d);
    Accumulate(c.pooled, p);
    c.worst_within_grace = std::min(c.worst_within_grace, p.guaranteed_within_grace);
    // The fraction rounds to 100.0% with one late grant in thousands: count them.
    const auto late = [](const sim::LeaseSimulationResult& r) {
      return static_cast<int>(std::lround((1 - r.guaranteed_within_grace) * r.guaranteed_requests));
    };
    c.late_grants += late(p);
    c.dedicated_late_grants += late(d);
    c.max_guaranteed_delay_s = std::max(c.max_guaranteed_delay_s, p.guaranteed_delay_max_s);
    c.ratio_min = std::min(c.ratio_min, ratio);
    c.ratio_max = std::max(c.ratio_max, ratio);
  }
  return c;
}

double Ratio(const Comparison& c) { return c.pooled.mean_utilisation / c.dedicated.mean_utilisation; }
double Ceiling(const Comparison& c) { return c.pooled.offered_load / c.dedicated.mean_utilisation; }

void PrintComparison(const Setting& s, const Comparison& c) {
  const double n = c.seeds;
  const sim::LeaseSimulationResult& d = c.dedicated;
  const sim::LeaseSimulationResult& p = c.pooled;
  std::printf("%d teams x 16 nominal H100 (%d GPUs), %d weeks, sprint probability %.2f, bursts %.1fx quota%s; "
              "mean of %d seeds\n\n",
              s.teams, 16 * s.teams, s.workload.weeks, s.workload.sprint_probability,
              s.workload.burst_factor, s.workload.impatient ? "" : ", patient jobs", c.seeds);
  std::printf("%-46s %12s %12s\n", "", "dedicated", "pooled");
  std::printf("%-46s %11.1f%% %11.1f%%\n", "offered load (work asked for / capacity)", 100 * d.offered_load / n, 100 * p.offered_load / n);
  std::printf("%-46s %11.1f%% %11.1f%%\n", "mean utilisation (busy GPU-hours / capacity)", 100 * d.mean_utilisation / n, 100 * p.mean_utilisation / n);
  std::printf("%-46s %11.1f%% %11.1f%%\n", "  held by leases", 100 * d.held_utilisation / n, 100 * p.held_utilisation / n);
  std::printf("%-46s %12s %11.2fx   (seeds %.2f-%.2f; target >= 2.5x)\n", "pooled / dedicated", "", Ratio(c), c.ratio_min, c.ratio_max);
  std::printf("%-46s %12s %11.2fx   (offered load / dedicated)\n", "  ceiling: the pool running all offered work", "", Ceiling(c));
  std::printf("%-46s %12.0f %12.0f\n", "idle GPU-hours while requests waited", d.idle_while_waiting_gpu_hours / n, p.idle_while_waiting_gpu_hours / n);
  std::printf("%-46s %11.2f%% %11.2f%%   (of capacity; target <= 0.5%%)\n", "  of which a waiting request fit (placement)",
              100 * IdleWhileFitShare(d, n), 100 * IdleWhileFitShare(p, n));
  std::printf("%-46s %12.0f %12.0f\n", "guaranteed requests", d.guaranteed_requests / n, p.guaranteed_requests / n);
  std::printf("%-46s %12.0f %12.0f\n", "  delay mean (s)", d.guaranteed_delay_mean_s / n, p.guaranteed_delay_mean_s / n);
  std::printf("%-46s %12.0f %12.0f\n", "  delay p95 (s)", d.guaranteed_delay_p95_s / n, p.guaranteed_delay_p95_s / n);
  std::printf("%-46s %12s %12.0f\n", "  delay max over seeds (s)", "", c.max_guaranteed_delay_s);
  std::printf("%-46s %11.1f%% %11.1f%%   (worst seed %.1f%%)\n", "  admitted within their class's grace period",
              100 * d.guaranteed_within_grace / n, 100 * p.guaranteed_within_grace / n, 100 * c.worst_within_grace);
  std::printf("%-46s %12d %12d   (all seeds; target 0)\n", "  late (past their grace period)", c.dedicated_late_grants,
              c.late_grants);
  std::printf("%-46s %12.0f %12.0f\n", "burst GPU-hours per sprint week", d.burst_gpu_hours_per_sprint_week / n, p.burst_gpu_hours_per_sprint_week / n);
  std::printf("%-46s %12.0f %12.0f\n", "preemptions", d.preemptions / n, p.preemptions / n);
  std::printf("%-46s %12.0f %12.0f\n", "  of which moves (defragmentation)", d.moves / n, p.moves / n);
  std::printf("%-46s %12d %12d   (all seeds; target 0)\n", "  preemption loops (A takes B's, B takes A's)",
              d.preemption_loops, p.preemption_loops);
  std::printf("%-46s %12.1f %12.1f\n", "GPU-hours lost to preemption (work)", d.lost_gpu_hours / n, p.lost_gpu_hours / n);
  std::printf("%-46s %12.1f %12.1f\n", "GPU-hours loading checkpoints after preemption", d.restart_gpu_hours / n, p.restart_gpu_hours / n);
  std::printf("%-46s %12.3f %12.3f\n", "Jain fairness (received/demanded)", d.jain_fairness / n, p.jain_fairness / n);
  std::printf("%-46s %12.0f %12.0f\n", "jobs completed", d.jobs_completed / n, p.jobs_completed / n);
  std::printf("%-46s %12.0f %12.0f\n", "jobs abandoned (never started)", d.jobs_abandoned / n, p.jobs_abandoned / n);
}

void PrintJson(const Comparison& c) {
  const double n = c.seeds;
  auto line = [](const char* metric, double value, const char* unit, double ref) {
    gpupool::bench::PrintJsonFigure("teams", metric, value, unit, "dedicated", ref);
  };
  const sim::LeaseSimulationResult& d = c.dedicated;
  const sim::LeaseSimulationResult& p = c.pooled;
  line("mean_utilisation", p.mean_utilisation / n, "fraction", d.mean_utilisation / n);
  line("offered_load", p.offered_load / n, "fraction", d.offered_load / n);
  line("utilisation_ratio_ceiling", Ceiling(c), "x", 1.0);
  line("guaranteed_delay_max", c.max_guaranteed_delay_s, "s", 0);
  line("guaranteed_within_grace", c.worst_within_grace, "fraction", d.guaranteed_within_grace / n);
  line("guaranteed_late", c.late_grants, "count", c.dedicated_late_grants);
  line("burst_gpu_hours_per_sprint_week", p.burst_gpu_hours_per_sprint_week / n, "GPU-h", d.burst_gpu_hours_per_sprint_week / n);
  line("lost_gpu_hours", p.lost_gpu_hours / n, "GPU-h", d.lost_gpu_hours / n);
  line("restart_gpu_hours", p.restart_gpu_hours / n, "GPU-h", d.restart_gpu_hours / n);
  line("jain_fairness", p.jain_fairness / n, "index", d.jain_fairness / n);
  line("idle_while_fitting_work_waited", IdleWhileFitShare(p, n), "fraction of capacity", IdleWhileFitShare(d, n));
  line("preemption_loops", p.preemption_loops, "count", d.preemption_loops);
}

// One line per setting: how the ratio and its ceiling move with the workload's parameters.
void Sweep(const std::vector<uint64_t>& seeds, int weeks) {
  std::vector<Setting> settings;
  auto add = [&](int teams, double burst, double probability, bool impatient) {
    Setting s;
    s.teams = teams;
    s.workload.weeks = weeks;
    s.workload.burst_factor = burst;
    s.workload.sprint_probability = probability;
    s.workload.impatient = impatient;
    settings.push_back(s);
  };
  for (int teams : {4, 8, 16}) add(teams, 3.0, 0.3, true);
  for (double burst : {2.0, 4.0, 6.0}) add(4, burst, 0.3, true);
  for (double probability : {0.15, 0.5}) add(4, 3.0, probability, true);
  add(4, 6.0, 0.15, true);
  add(16, 6.0, 0.15, true);
  add(4, 3.0, 0.3, false);
  std::printf("%5s %6s %7s %8s | %8s %10s %8s | %7s %8s | %13s\n", "teams", "burst", "sprint", "patient",
              "offered", "dedicated", "pooled", "ratio", "ceiling", "within grace");
  for (const Setting& s : settings) {
    Comparison c = Compare(s, seeds, /*quiet=*/true);
    const double n = c.seeds;
    std::printf("%5d %5.1fx %7.2f %8s | %7.1f%% %9.1f%% %7.1f%% | %6.2fx %7.2fx | %12.1f%%\n", s.teams,
                s.workload.burst_factor, s.workload.sprint_probability,
                s.workload.impatient ? "no" : "yes", 100 * c.pooled.offered_load / n,
                100 * c.dedicated.mean_utilisation / n, 100 * c.pooled.mean_utilisation / n, Ratio(c),
                Ceiling(c), 100 * c.worst_within_grace);
    std::fflush(stdout);
  }
}

// --urgent: the teams pool plus a node of kSpareGpus H100 that no nominal quota covers (so every
// row's quotas fit beside the largest reserve), the default classes plus `urgent`, and the reserve.
constexpr int kSpareGpus = 4;

std::string UrgentPoolYaml(int teams, int reserve) {
  std::string yaml = absl::StrReplaceAll(
      sim::TeamsPoolYaml(teams),
      {{"teams:\n", absl::StrCat("  - {name: spare, gpus: [{model: H100-80GB, count: ", kSpareGpus, "}]}\n",
                                 "priority_classes:\n",
                                 "  - {name: urgent, value: 2000, preemptible: true, grace_period_s: 30}\n",
                                 "  - {name: production-inference, value: 1000, preemptible: false, grace_period_s: 300}\n",
                                 "  - {name: training, value: 500, grace_period_s: 120, checkpoint_interval_s: 600}\n",
                                 "  - {name: experiment, value: 100, grace_period_s: 30, checkpoint_interval_s: 600}\n",
                                 "teams:\n")}});
  if (reserve > 0) {
    absl::StrAppend(&yaml, "reserve:\n  - {group: H100-80GB, gpus: ", reserve, ", for_priority_at_least: urgent}\n");
  }
  return yaml;
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

struct UrgentRow {
  int reserve = 0;
  std::vector<double> waits;  // urgent time to admission, every seed's
  double utilisation = 0, held = 0, within_grace = 0, preemptions = 0, lost = 0;  // sums over seeds
  int seeds = 0;
};

void Urgent(const Setting& setting, const std::vector<uint64_t>& seeds, bool json) {
  std::vector<UrgentRow> rows;
  for (int reserve : {0, 1, 2, kSpareGpus}) {
    absl::StatusOr<PoolConfig> config = ParsePoolConfig(UrgentPoolYaml(setting.teams, reserve), "teams-urgent");
    if (!config.ok()) {
      std::fprintf(stderr, "teams bench: %s\n", std::string(config.status().message()).c_str());
      std::exit(1);
    }
    auto driver = SimulatedDriver::Create(*config->simulated_nodes).value();
    Inventory inventory = Inventory::FromDiscovery(driver->Discover().value()).value();
    UrgentRow row;
    row.reserve = reserve;
    for (uint64_t seed : seeds) {
      sim::TeamWorkloadOptions workload = setting.workload;
      workload.seed = seed;
      std::vector<sim::SimJob> jobs = sim::GenerateTeamWorkload(config->scheduling, "H100-80GB", workload);
      sim::LeaseSimulationResult r =
          sim::SimulateLeases(inventory, config->scheduling, jobs, {.pooled = true, .scheduler = setting.scheduler});
      const std::vector<double>& waits = r.admission_wait_s["urgent"];
      row.waits.insert(row.waits.end(), waits.begin(), waits.end());
      row.utilisation += r.mean_utilisation;
      row.held += r.held_utilisation;
      row.within_grace += r.guaranteed_within_grace;
      row.preemptions += r.preemptions;
      row.lost += r.lost_gpu_hours;
      ++row.seeds;
      if (!json) {
        std::fprintf(stderr, "  reserve %d, seed %llu: %zu urgent admitted, p99 %.0f s, utilisation %.1f%%\n", reserve,
                     static_cast<unsigned long long>(seed), waits.size(), Quantile(waits, 0.99),
                     100 * r.mean_utilisation);
      }
    }
    rows.push_back(std::move(row));
  }
  const UrgentRow& base = rows.front();
  if (json) {
    for (const UrgentRow& r : rows) {
      const std::string suffix = absl::StrCat("_reserve_", r.reserve);
      gpupool::bench::PrintJsonFigure("teams", ("urgent_admission_p50" + suffix).c_str(), Quantile(r.waits, 0.5), "s",
                                      "reserve_0", Quantile(base.waits, 0.5));
      gpupool::bench::PrintJsonFigure("teams", ("urgent_admission_p99" + suffix).c_str(), Quantile(r.waits, 0.99), "s",
                                      "reserve_0", Quantile(base.waits, 0.99));
      gpupool::bench::PrintJsonFigure("teams", ("mean_utilisation" + suffix).c_str(), r.utilisation / r.seeds, "fraction",
                                      "reserve_0", base.utilisation / base.seeds);
    }
    return;
  }
  std::printf("%d teams x 16 nominal H100 + %d H100 no quota covers (%d GPUs), %d weeks, urgent work %.1f per team-day; "
              "%d seeds (percentiles over every seed's urgent requests, other figures means)\n\n",
              setting.teams, kSpareGpus, 16 * setting.teams + kSpareGpus, setting.workload.weeks,
              setting.workload.urgent_per_team_day, base.seeds);
  std::printf("%-8s %8s %9s %9s %9s %10s | %12s %9s %8s %11s %8s\n", "reserve", "urgent", "p50 (s)", "p99 (s)",
              "max (s)", "<= 1 s", "utilisation", "vs 0", "held", "preemptions", "in grace");
  for (const UrgentRow& r : rows) {
    const double n = r.seeds;
    const double within_1s = r.waits.empty() ? 0
                                             : static_cast<double>(std::count_if(r.waits.begin(), r.waits.end(),
                                                                                 [](double w) { return w <= 1; })) /
                                                   static_cast<double>(r.waits.size());
    std::printf("%-8d %8zu %9.0f %9.0f %9.0f %9.1f%% | %11.1f%% %+8.1f%% %7.1f%% %11.0f %7.1f%%\n", r.reserve,
                r.waits.size(), Quantile(r.waits, 0.5), Quantile(r.waits, 0.99),
                r.waits.empty() ? 0.0 : *std::max_element(r.waits.begin(), r.waits.end()), 100 * within_1s,
                100 * r.utilisation / n, 100 * (r.utilisation / n - base.utilisation / base.seeds), 100 * r.held / n,
                r.preemptions / n, 100 * r.within_grace / n);
  }
  std::printf("\nreserve 0 is the same-run baseline; target (issue 24): urgent p99 <= 1 s with a reserve\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false, sweep = false, urgent = false;
  std::string seed_list = "42-44";
  Setting setting;
  auto value_of = [](const char* arg, const char* flag) -> const char* {
    const size_t n = std::strlen(flag);
    return std::strncmp(arg, flag, n) == 0 ? arg + n : nullptr;
  };
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = nullptr;
    if (std::strcmp(a, "--json") == 0) json = true;
    else if (std::strcmp(a, "--sweep") == 0) sweep = true;
    else if (std::strcmp(a, "--urgent") == 0) urgent = true;
    else if ((v = value_of(a, "--urgent-per-day="))) setting.workload.urgent_per_team_day = std::atof(v);
    else if (std::strcmp(a, "--patient") == 0) setting.workload.impatient = false;
    else if (std::strcmp(a, "--no-moves") == 0) setting.scheduler.move_for_guarantees = false;
    else if ((v = value_of(a, "--weeks="))) setting.workload.weeks = std::atoi(v);
    else if ((v = value_of(a, "--seeds=")) || (v = value_of(a, "--seed="))) seed_list = v;
    else if ((v = value_of(a, "--teams="))) setting.teams = std::atoi(v);
    else if ((v = value_of(a, "--burst="))) setting.workload.burst_factor = std::atof(v);
    else if ((v = value_of(a, "--sprint-probability="))) setting.workload.sprint_probability = std::atof(v);
    else if ((v = value_of(a, "--placement-policy="))) setting.scheduler.placement_policy = v;
    else {
      // A mistyped flag must not silently run the default comparison (minutes of work).
      std::fprintf(stderr,
                   "teams bench: unknown option '%s'\nusage: teams_bench [--json] [--weeks=N] "
                   "[--seeds=A-B] [--teams=N] [--burst=F] [--sprint-probability=P] [--patient] "
                   "[--no-moves] [--placement-policy=NAME] | --sweep [--seeds=A-B] [--weeks=N] | --urgent "
                   "[--seeds=A-B] [--weeks=N] [--urgent-per-day=R]\n",
                   a);
      return 2;
    }
  }
  absl::StatusOr<std::vector<uint64_t>> seeds = sim::ParseSeedList(seed_list);
  const sim::TeamWorkloadOptions& w = setting.workload;
  if (!seeds.ok() || setting.teams < 1 || w.weeks < 1 || !(w.burst_factor > 0 && w.burst_factor <= 100) ||
      !(w.sprint_probability >= 0 && w.sprint_probability <= 1)) {
    std::fprintf(stderr,
                 "teams bench: bad --seeds, --teams (>= 1), --weeks (>= 1), --burst (0..100] or "
                 "--sprint-probability [0, 1]\n");
    return 2;
  }
  if (sweep) {
    Sweep(*seeds, setting.workload.weeks);
    return 0;
  }
  if (urgent) {
    if (setting.workload.urgent_per_team_day == 0) setting.workload.urgent_per_team_day = 2;
    if (!(setting.workload.urgent_per_team_day > 0 && setting.workload.urgent_per_team_day <= 1000)) {
      std::fprintf(stderr, "teams bench: --urgent-per-day must be in (0, 1000]\n");
      return 2;
    }
    Urgent(setting, *seeds, json);
    return 0;
  }
  Comparison c = Compare(setting, *seeds, /*quiet=*/json);
  if (json) {
    PrintJson(c);
  } else {
    PrintComparison(setting, c);
  }
  return 0;
}
