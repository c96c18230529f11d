#include "runtime/cli/simulate_teams.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "pool/sim/lease_simulation.h"
#include "pool/sim/html_report.h"
#include "runtime/cli/command.h"
#include "runtime/cli/text_table.h"

namespace gpupool::cli {
namespace {

namespace sim = ::gpupool::pool::sim;

nlohmann::json ToJson(const sim::LeaseSimulationResult& r) {
  nlohmann::json teams = nlohmann::json::array();
  for (const sim::TeamFigures& t : r.teams) {
    teams.push_back({{"team", t.team},
                     {"demanded_gpu_hours", t.demanded_gpu_hours},
                     {"received_gpu_hours", t.received_gpu_hours},
                     {"lost_gpu_hours", t.lost_gpu_hours},
                     {"preemptions", t.preemptions}});
  }
  return {{"mode", r.mode},
          {"offered_load", r.offered_load},
          {"mean_utilisation", r.mean_utilisation},
          {"held_utilisation", r.held_utilisation},
          {"idle_while_waiting_gpu_hours", r.idle_while_waiting_gpu_hours},
          {"guaranteed_requests", r.guaranteed_requests},
          {"guaranteed_delay_mean_s", r.guaranteed_delay_mean_s},
          {"guaranteed_delay_p95_s", r.guaranteed_delay_p95_s},
          {"guaranteed_delay_max_s", r.guaranteed_delay_max_s},
          {"guaranteed_within_grace", r.guaranteed_within_grace},
          {"burst_gpu_hours_per_sprint_week", r.burst_gpu_hours_per_sprint_week},
          {"preemptions", r.preemptions},
          {"moves", r.moves},
          {"lost_gpu_hours", r.lost_gpu_hours},
          {"restart_gpu_hours", r.restart_gpu_hours},
          {"jain_fairness", r.jain_fairness},
          {"jobs_completed", r.jobs_completed},
          {"jobs_abandoned", r.jobs_abandoned},
          {"jobs_unfinished", r.jobs_unfinished},
          {"teams", teams}};
}

// The headline figures, dedicated against pooled: for the terminal and the page.
TextTable ComparisonTable(const sim::LeaseSimulationResult& dedicated,
                          const sim::LeaseSimulationResult& pooled) {
  auto pct = [](double v) { return absl::StrFormat("%.1f%%", 100 * v); };
  auto num = [](double v) { return absl::StrFormat("%.0f", v); };
  TextTable table({"", "DEDICATED", "POOLED"});
  table.AddRow({"offered load (work asked for / capacity)", pct(dedicated.offered_load), pct(pooled.offered_load)});
  table.AddRow({"mean utilisation (busy GPU-hours / capacity)", pct(dedicated.mean_utilisation), pct(pooled.mean_utilisation)});
  table.AddRow({"  held by leases", pct(dedicated.held_utilisation), pct(pooled.held_utilisation)});
  table.AddRow({"idle GPU-hours while requests waited", num(dedicated.idle_while_waiting_gpu_hours),
                num(pooled.idle_while_waiting_gpu_hours)});
  table.AddRow({"guaranteed requests admitted within their class's grace period",
                pct(dedicated.guaranteed_within_grace), pct(pooled.guaranteed_within_grace)});
  table.AddRow({"  their wait p95 / max (s)",
                num(dedicated.guaranteed_delay_p95_s) + " / " + num(dedicated.guaranteed_delay_max_s),
                num(pooled.guaranteed_delay_p95_s) + " / " + num(pooled.guaranteed_delay_max_s)});
  table.AddRow({"burst GPU-hours per sprint week", num(dedicated.burst_gpu_hours_per_sprint_week),
                num(pooled.burst_gpu_hours_per_sprint_week)});
  table.AddRow({"preemptions", num(dedicated.preemptions), num(pooled.preemptions)});
  table.AddRow({"  of which moves (defragmentation)", num(dedicated.moves), num(pooled.moves)});
  table.AddRow({"GPU-hours lost to preemption", absl::StrFormat("%.1f", dedicated.lost_gpu_hours),
                absl::StrFormat("%.1f", pooled.lost_gpu_hours)});
  table.AddRow({"GPU-hours loading checkpoints after preemption",
                absl::StrFormat("%.1f", dedicated.restart_gpu_hours),
                absl::StrFormat("%.1f", pooled.restart_gpu_hours)});
  table.AddRow({"Jain fairness (received / demanded)", absl::StrFormat("%.3f", dedicated.jain_fairness),
                absl::StrFormat("%.3f", pooled.jain_fairness)});
  table.AddRow({"jobs completed / abandoned / unfinished",
                absl::StrFormat("%d / %d / %d", dedicated.jobs_completed, dedicated.jobs_abandoned, dedicated.jobs_unfinished),
                absl::StrFormat("%d / %d / %d", pooled.jobs_completed, pooled.jobs_abandoned, pooled.jobs_unfinished)});
  return table;
}

// The page: utilisation day by day, dedicated against pooled, and the headline figures.
void WriteHtml(const TeamsSimulationFlags& flags, int gpus, const sim::LeaseSimulationResult& dedicated,
               const sim::LeaseSimulationResult& pooled) {
  sim::LineChart chart{.title = "GPUs held by leases, day by day (% of the pool)",
                       .x_label = "day",
                       .y_label = "held (% of the pool's GPUs)",
                       .x_max = static_cast<double>(std::max(dedicated.held_by_day.size(), pooled.held_by_day.size())),
                       .x_tick = 7,
                       .y_max = 100};
  for (const sim::LeaseSimulationResult* r : {&dedicated, &pooled}) {
    sim::ChartSeries series{r->mode, {}};
    // Each day's figure drawn across the day: a step per day.
    for (size_t day = 0; day < r->held_by_day.size(); ++day) {
      series.points.push_back({static_cast<double>(day), 100 * r->held_by_day[day]});
      series.points.push_back({static_cast<double>(day + 1), 100 * r->held_by_day[day]});
    }
    chart.series.push_back(std::move(series));
  }
  std::string body = absl::StrCat(
      "<h1>gpupool simulate --workload teams</h1>\n<p>", gpus, " GPUs, ", flags.weeks,
      " weeks, seed ", flags.seed, absl::StrFormat(", sprint probability %.2f, bursts %.1fx quota",
                                                   flags.sprint_probability, flags.burst_factor),
      flags.config.empty() ? "" : absl::StrCat(", ", sim::HtmlEscape(flags.config)), ".</p>\n",
      sim::LineChartSvg(chart), ComparisonTable(dedicated, pooled).RenderHtml(),
      absl::StrFormat("<p>Pooled utilisation is %.2fx dedicated's.</p>\n",
                      pooled.mean_utilisation / std::max(1e-9, dedicated.mean_utilisation)));
  if (absl::Status s = sim::WriteHtmlPage(flags.html, "gpupool simulate: teams", body); !s.ok()) {
    throw CommandFailed(absl::StrCat("--html: ", s.message()));
  }
  std::cerr << "simulate: wrote " << flags.html << "\n";
}

}  // namespace

void RunTeamsSimulation(const TeamsSimulationFlags& flags) {
  absl::StatusOr<pool::PoolConfig> config =
      flags.config.empty() ? pool::ParsePoolConfig(sim::TeamsPoolYaml(sim::kDefaultTeams), "built-in pool")
                           : pool::LoadPoolConfig(flags.config);
  if (!config.ok()) throw CommandFailed(std::string(config.status().message()));
  if (!config->simulated_nodes.has_value() || config->scheduling.teams.empty()) {
    throw CommandFailed(absl::StrFormat("%s: the teams workload needs `nodes:` and `teams:`",
                                        flags.config));
  }
  if (flags.weeks < 1 || flags.weeks > 520) throw CommandFailed("--weeks must be in 1..520");
  auto driver = pool::SimulatedDriver::Create(*config->simulated_nodes);
  if (!driver.ok()) throw CommandFailed(std::string(driver.status().message()));
  absl::StatusOr<pool::Inventory> inventory = pool::Inventory::FromDiscovery((*driver)->Discover().value());
  if (!inventory.ok()) throw CommandFailed(std::string(inventory.status().message()));
  // Every team's jobs run on the group of the first quota the first team holds.
  const pool::TeamQuota* first = nullptr;
  for (const pool::Team& t : config->scheduling.teams) {
    if (!t.quotas.empty()) {
      first = &t.quotas.front();
      break;
    }
  }
  if (first == nullptr) throw CommandFailed("no team has a quota: nothing to simulate");
  std::vector<sim::SimJob> jobs = sim::GenerateTeamWorkload(
      config->scheduling, first->group,
      {.weeks = flags.weeks, .seed = flags.seed, .sprint_probability = flags.sprint_probability,
       .burst_factor = flags.burst_factor});
  std::cerr << absl::StrFormat("simulate: %d jobs over %d weeks on %d GPUs, %d teams\n", jobs.size(),
                               flags.weeks, inventory->gpu_count(), config->scheduling.teams.size());
  auto progress = [](const char* mode) {
    return [mode](int64_t now, int64_t horizon) {
      constexpr int64_t kWeek = 7 * 86400;
      if (now % kWeek < 86400) {
        std::cerr << absl::StrFormat("simulate: %s week %d of %d\n", mode, now / kWeek + 1, horizon / kWeek + 1);
      }
    };
  };
  sim::LeaseSimulationResult dedicated = sim::SimulateLeases(
      *inventory, config->scheduling, jobs, {.pooled = false, .progress = progress("dedicated")});
  sim::LeaseSimulationResult pooled = sim::SimulateLeases(
      *inventory, config->scheduling, jobs, {.pooled = true, .progress = progress("pooled")});
  if (!flags.html.empty()) WriteHtml(flags, inventory->gpu_count(), dedicated, pooled);
  if (flags.json) {
    std::cout << nlohmann::json{{"workload", "teams"},
                                {"weeks", flags.weeks},
                                {"seed", flags.seed},
                                {"gpus", inventory->gpu_count()},
                                {"dedicated", ToJson(dedicated)},
                                {"pooled", ToJson(pooled)},
                                {"utilisation_ratio", pooled.mean_utilisation /
                                                          std::max(1e-9, dedicated.mean_utilisation)}}
                     .dump(2)
              << "\n";
    return;
  }
  const TextTable table = ComparisonTable(dedicated, pooled);
  auto num = [](double v) { return absl::StrFormat("%.0f", v); };
  std::cout << table.Render()
            << absl::StrFormat("pooled utilisation is %.2fx dedicated's (at most %.2fx: the offered "
                               "load over dedicated's)\n",
                               pooled.mean_utilisation / std::max(1e-9, dedicated.mean_utilisation),
                               pooled.offered_load / std::max(1e-9, dedicated.mean_utilisation));
  TextTable teams({"TEAM", "DEMANDED GPU-H", "RECEIVED DEDICATED", "RECEIVED POOLED", "LOST POOLED"});
  for (size_t i = 0; i < pooled.teams.size() && i < dedicated.teams.size(); ++i) {
    teams.AddRow({pooled.teams[i].team, num(pooled.teams[i].demanded_gpu_hours),
                  num(dedicated.teams[i].received_gpu_hours), num(pooled.teams[i].received_gpu_hours),
                  absl::StrFormat("%.1f", pooled.teams[i].lost_gpu_hours)});
  }
  std::cout << "\n" << teams.Render();
}

}  // namespace gpupool::cli
