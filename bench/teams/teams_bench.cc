// Pooled versus dedicated on the generated multi-team workload: the same jobs run through the
// same scheduler twice, once with each team confined to its nominal quota (dedicated GPUs) and
// once sharing (borrowing, reclaim with preemption, checkpoints). Issue 3's target: pooled
// utilisation at least 2.5x dedicated's, guaranteed requests admitted within one grace period.
//
//   bench/run teams [--json] [--weeks=N] [--seed=S]
#include <cstdio>

#include "bench/common/json_figure.h"
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "pool/sim/lease_simulation.h"

using namespace gpupool::pool;

int main(int argc, char** argv) {
  bool json = false;
  sim::TeamWorkloadOptions workload;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json = true;
    if (std::strncmp(argv[i], "--weeks=", 8) == 0) workload.weeks = std::atoi(argv[i] + 8);
    if (std::strncmp(argv[i], "--seed=", 7) == 0) workload.seed = std::strtoull(argv[i] + 7, nullptr, 10);
    if (std::strcmp(argv[i], "--patient") == 0) workload.impatient = false;
  }
  PoolConfig config = ParsePoolConfig(sim::kDefaultTeamsPoolYaml, "teams-bench").value();
  auto driver = SimulatedDriver::Create(*config.simulated_nodes).value();
  Inventory inventory = Inventory::FromDiscovery(driver->Discover().value()).value();
  std::vector<sim::SimJob> jobs = sim::GenerateTeamWorkload(config.scheduling, "H100-80GB", workload);
  std::fprintf(stderr, "teams bench: %zu jobs over %d weeks on 64 H100, 4 teams\n", jobs.size(), workload.weeks);
  auto progress = [](const char* mode) {
    return [mode](int64_t now, int64_t horizon) {
      if (now % (7 * 86400) < 86400) std::fprintf(stderr, "  %s: week %ld of %ld\n", mode, static_cast<long>(now / (7 * 86400)) + 1, static_cast<long>(horizon / (7 * 86400)));
    };
  };
  sim::LeaseSimulationResult dedicated =
      sim::SimulateLeases(inventory, config.scheduling, jobs, {.pooled = false, .progress = progress("dedicated")});
  sim::LeaseSimulationResult pooled =
      sim::SimulateLeases(inventory, config.scheduling, jobs, {.pooled = true, .progress = progress("pooled")});
  if (json) {
    auto line = [](const char* metric, double value, const char* unit, double ref) {
      gpupool::bench::PrintJsonFigure("teams", metric, value, unit, "dedicated", ref);
    };
    line("mean_utilisation", pooled.mean_utilisation, "fraction", dedicated.mean_utilisation);
    line("guaranteed_delay_max", pooled.guaranteed_delay_max_s, "s", dedicated.guaranteed_delay_max_s);
    line("guaranteed_within_grace", pooled.guaranteed_within_grace, "fraction", dedicated.guaranteed_within_grace);
    line("burst_gpu_hours_per_sprint_week", pooled.burst_gpu_hours_per_sprint_week, "GPU-h", dedicated.burst_gpu_hours_per_sprint_week);
    line("lost_gpu_hours", pooled.lost_gpu_hours, "GPU-h", dedicated.lost_gpu_hours);
    line("jain_fairness", pooled.jain_fairness, "index", dedicated.jain_fairness);
    return 0;
  }
  std::printf("%-40s %12s %12s\n", "64 H100, 4 teams x 16 nominal", "dedicated", "pooled");
  std::printf("%-40s %12.1f%% %11.1f%%\n", "mean utilisation", 100 * dedicated.mean_utilisation, 100 * pooled.mean_utilisation);
  std::printf("%-40s %12s %11.2fx   (target >= 2.5x)\n", "pooled / dedicated", "", pooled.mean_utilisation / dedicated.mean_utilisation);
  std::printf("%-40s %12d %12d\n", "guaranteed requests", dedicated.guaranteed_requests, pooled.guaranteed_requests);
  std::printf("%-40s %12.0f %12.0f\n", "  delay mean (s)", dedicated.guaranteed_delay_mean_s, pooled.guaranteed_delay_mean_s);
  std::printf("%-40s %12.0f %12.0f\n", "  delay p95 (s)", dedicated.guaranteed_delay_p95_s, pooled.guaranteed_delay_p95_s);
  std::printf("%-40s %12.0f %12.0f\n", "  delay max (s)", dedicated.guaranteed_delay_max_s, pooled.guaranteed_delay_max_s);
  std::printf("%-40s %11.1f%% %11.1f%%\n", "  admitted within a grace period", 100 * dedicated.guaranteed_within_grace, 100 * pooled.guaranteed_within_grace);
  std::printf("%-40s %12.0f %12.0f\n", "burst GPU-hours per sprint week", dedicated.burst_gpu_hours_per_sprint_week, pooled.burst_gpu_hours_per_sprint_week);
  std::printf("%-40s %12d %12d\n", "preemptions", dedicated.preemptions, pooled.preemptions);
  std::printf("%-40s %12.1f %12.1f\n", "GPU-hours lost to preemption", dedicated.lost_gpu_hours, pooled.lost_gpu_hours);
  std::printf("%-40s %12.3f %12.3f\n", "Jain fairness (received/demanded)", dedicated.jain_fairness, pooled.jain_fairness);
  std::printf("%-40s %12d %12d\n", "jobs completed", dedicated.jobs_completed, pooled.jobs_completed);
  std::printf("%-40s %12d %12d\n", "jobs abandoned (never started)", dedicated.jobs_abandoned, pooled.jobs_abandoned);
  std::printf("%-40s %12d %12d\n", "jobs unfinished at the horizon", dedicated.jobs_unfinished, pooled.jobs_unfinished);
  return 0;
}
