// `gpupool simulate`: replays the Alibaba GPU-sharing trace (openb) through a placement policy in
// the FGD paper's protocol mode and reports the allocation curve (pool/sim/protocol.h).
//
//   gpupool simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv
//                    --policy fgd --seeds 42-51 --tune 1.3 [--json]
//                    [--compare best-fit,random] [--html report.html]
//
// --compare replays more policies on the same seeds, for the table and the page (the JSON stays
// the one policy's); --html writes a self-contained page with the allocation curves.
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "pool/placement/policy_registry.h"
#include "pool/scheduler/scheduler.h"
#include "pool/sim/html_report.h"
#include "pool/sim/protocol.h"
#include "pool/sim/seed_list.h"
#include "pool/sim/trace_reader.h"
#include "runtime/cli/command.h"
#include "runtime/cli/simulate_teams.h"
#include "runtime/cli/simulate_timed.h"
#include "runtime/cli/text_table.h"

namespace gpupool::cli {
namespace {

namespace sim = ::gpupool::pool::sim;
namespace placement = ::gpupool::pool::placement;

constexpr int kMaxPercent = 130;

struct SimulateFlags {
  std::string nodes;
  std::string pods;
  std::string policy = "default";
  std::string seeds = "42-51";
  double tune = 1.3;
  std::string tie_order = "name";
  bool json = false;
  std::string compare;  // more policies, comma-separated
  std::string html;     // write the report page here
  // --workload teams: the lease simulator instead of the trace replay.
  std::string workload = "trace";
  bool timed = false;  // replay in time with departures instead of the protocol
  double compress = 1.0;
  TeamsSimulationFlags teams;
};

// Arrival percentages shown in the human table.
constexpr int kShownPercents[] = {50, 80, 90, 100, 110, 120, 130};

std::string Percent(const std::optional<double>& v) {
  return v ? absl::StrFormat("%.2f", *v) : std::string("-");
}

nlohmann::json Number(const std::optional<double>& v) {
  if (!v) return nullptr;
  return std::round(*v * 10000) / 10000;  // the figures have 2 decimals; their means need few more
}

// Allocation at the shown arrival percentages, a row per policy. `results` holds the --policy's
// result first, then the --compare policies'.
TextTable CurveTable(const std::vector<sim::ProtocolResult>& results) {
  std::vector<std::string> header = {"POLICY \\ ARRIVED"};
  for (int p : kShownPercents) header.push_back(absl::StrCat(p, "%"));
  TextTable curve(header);
  for (const sim::ProtocolResult& each : results) {
    std::vector<std::string> row = {each.policy};
    for (int p : kShownPercents) row.push_back(Percent(each.mean_allocated_pct[p]));
    curve.AddRow(row);
  }
  return curve;
}

void PrintTable(const std::vector<sim::ProtocolResult>& results, const SimulateFlags& flags) {
  const sim::ProtocolResult& r = results.front();
  std::cout << absl::StrFormat(
      "policy %s, %d seeds (%s), tune %.2f, %d GPUs: allocated GPU demand (%% of the cluster's "
      "GPUs) by arrived demand\n\n",
      r.policy, static_cast<int>(r.seeds.size()), flags.seeds, flags.tune, r.cluster_gpus);
  std::cout << CurveTable(results).Render() << "\n";

  TextTable seeds({"SEED", "AT 100%", "PODS", "PLACED", "DEMAND/CAPACITY", "SECONDS"});
  for (const sim::SeedResult& s : r.seeds) {
    seeds.AddRow({std::to_string(s.seed), Percent(s.allocated_pct[100]), std::to_string(s.pods),
                  std::to_string(s.placed),
                  absl::StrFormat("%.3f", static_cast<double>(s.workload_demand_milli) /
                                              (1000.0 * static_cast<double>(r.cluster_gpus))),
                  absl::StrFormat("%.2f", s.seconds)});
  }
  std::cout << seeds.Render();
  std::cout << absl::StrFormat("\nallocation at 100%% arrival (mean of %d seeds): %s%%\n",
                               static_cast<int>(r.seeds.size()), Percent(r.mean_allocated_pct[100]));
}

// The page: what was run, the curves (mean over the seeds) and the table of figures.
void WriteHtml(const std::vector<sim::ProtocolResult>& results, const SimulateFlags& flags) {
  const sim::ProtocolResult& r = results.front();
  sim::LineChart chart{.title = "Allocated GPU demand by arrived demand (mean of the seeds)",
                       .x_label = "arrived GPU demand (% of the cluster's GPUs)",
                       .y_label = "allocated (% of the cluster's GPUs)",
                       .x_max = kMaxPercent,
                       .y_max = 100,
                       .diagonal = "every arrival placed"};
  for (const sim::ProtocolResult& each : results) {
    sim::ChartSeries series{each.policy, {}};
    for (size_t p = 0; p < each.mean_allocated_pct.size(); ++p) {
      if (each.mean_allocated_pct[p]) series.points.push_back({static_cast<double>(p), *each.mean_allocated_pct[p]});
    }
    chart.series.push_back(std::move(series));
  }
  std::string body = absl::StrCat(
      "<h1>gpupool simulate</h1>\n<p>", sim::HtmlEscape(flags.pods), " on ", sim::HtmlEscape(flags.nodes),
      " (", r.cluster_gpus, " GPUs): protocol mode, seeds ", sim::HtmlEscape(flags.seeds),
      absl::StrFormat(", tune %.2f", flags.tune), ".</p>\n", sim::LineChartSvg(chart));
  // Where the policies part: from 80% arrival on, 80-100% allocated.
  chart.title = "Allocated by arrived demand from 80% on, where the policies differ";
  chart.x_min = 80;
  chart.x_tick = 5;
  chart.y_min = 80;
  chart.y_tick = 2;
  absl::StrAppend(&body, sim::LineChartSvg(chart), CurveTable(results).RenderHtml());
  const std::string title = absl::StrCat("gpupool simulate: ", r.policy);
  if (absl::Status s = sim::WriteHtmlPage(flags.html, title, body); !s.ok()) {
    throw CommandFailed(absl::StrCat("--html: ", s.message()));
  }
  std::cerr << "simulate: wrote " << flags.html << "\n";
}

void PrintJson(const sim::ProtocolResult& r, const SimulateFlags& flags) {
  nlohmann::json out;
  out["policy"] = r.policy;
  out["seeds"] = nlohmann::json::array();
  for (const sim::SeedResult& s : r.seeds) out["seeds"].push_back(s.seed);
  out["allocated_pct"] = nlohmann::json::array();
  for (const auto& v : r.mean_allocated_pct) out["allocated_pct"].push_back(Number(v));
  out["allocated_pct_at_100"] = Number(r.mean_allocated_pct[100]);
  out["tune"] = flags.tune;
  out["tie_order"] = flags.tie_order;
  out["nodes"] = flags.nodes;
  out["pods"] = flags.pods;
  out["cluster_gpus"] = r.cluster_gpus;
  out["per_seed"] = nlohmann::json::array();
  for (const sim::SeedResult& s : r.seeds) {
    out["per_seed"].push_back({{"seed", s.seed},
                               {"allocated_pct_at_100", Number(s.allocated_pct[100])},
                               {"pods", s.pods},
                               {"placed", s.placed},
                               {"workload_demand_milli", s.workload_demand_milli},
                               {"appended", s.appended},
                               {"removed", s.removed},
                               {"seconds", std::round(s.seconds * 1000) / 1000}});
  }
  std::cout << out.dump() << "\n";
}

void RunSimulate(const SimulateFlags& flags) {
  absl::StatusOr<std::vector<uint64_t>> seeds = sim::ParseSeedList(flags.seeds);
  if (!seeds.ok()) throw CommandFailed(absl::StrCat("--seeds: ", seeds.status().message()));
  if (!(flags.tune >= 0) || !std::isfinite(flags.tune)) {
    throw CommandFailed(absl::StrCat("--tune must be a non-negative number, got ", flags.tune));
  }
  absl::StatusOr<std::vector<sim::NodeCapacity>> nodes = sim::ReadNodeList(flags.nodes);
  if (!nodes.ok()) throw CommandFailed(std::string(nodes.status().message()));
  absl::StatusOr<std::vector<sim::PodSpec>> pods = sim::ReadPodList(flags.pods);
  if (!pods.ok()) throw CommandFailed(std::string(pods.status().message()));

  std::vector<std::string> policies = {flags.policy};
  for (absl::string_view p : absl::StrSplit(flags.compare, ',', absl::SkipEmpty())) {
    policies.emplace_back(p);
  }
  std::vector<sim::ProtocolResult> results;
  for (const std::string& policy : policies) {
    sim::ProtocolOptions options;
    options.policy = policy;
    options.seeds = *seeds;
    options.tune = flags.tune;
    options.max_percent = kMaxPercent;
    options.tie_order =
        flags.tie_order == "shuffled" ? sim::TieOrder::kShuffledPerSeed : sim::TieOrder::kByName;
    options.on_seed_done = [&policy](const sim::SeedResult& s, int done, int total) {
      std::cerr << absl::StrFormat(
          "simulate: %s seed %d (%d/%d): %s%% allocated at 100%% arrival, %.1f s\n", policy, s.seed,
          done, total, Percent(s.allocated_pct[100]), s.seconds);
    };
    absl::StatusOr<sim::ProtocolResult> result = sim::RunProtocol(*nodes, *pods, options);
    if (!result.ok()) throw CommandFailed(std::string(result.status().message()));
    results.push_back(*std::move(result));
  }
  if (flags.json) {
    PrintJson(results.front(), flags);
  } else {
    PrintTable(results, flags);
  }
  if (!flags.html.empty()) WriteHtml(results, flags);
}

std::string PolicyNameList(const char* separator) {
  std::string names = "default";
  for (std::string_view n : placement::PolicyNames()) absl::StrAppend(&names, separator, std::string(n));
  return absl::StrCat(names, separator, "packing");
}

// CLI11's check: empty when `name` is a policy, else what is wrong.
std::string UnknownPolicy(const std::string& name) {
  if (pool::ValidPlacementPolicy(std::string(placement::CanonicalPolicyName(name))).ok()) return std::string();
  return absl::StrCat("unknown policy '", name, "' (allowed: ", PolicyNameList(", "), ")");
}

}  // namespace

void RegisterSimulateCommand(CLI::App& app) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Replay the openb GPU-sharing trace through a placement policy (FGD paper protocol)");
  cmd->add_option("--workload", flags->workload,
                  "trace: replay --nodes/--pods (default); teams: a generated multi-team workload, "
                  "dedicated vs pooled, through the pool scheduler")
      ->check(CLI::IsMember({"trace", "teams"}));
  cmd->add_option("--nodes", flags->nodes, "Node list CSV (sn,cpu_milli,memory_mib,gpu,model)");
  cmd->add_option("--pods", flags->pods,
                  "Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...])");
  cmd->add_option("--config", flags->teams.config, "teams: YAML pool with nodes and teams");
  cmd->add_option("--weeks", flags->teams.weeks, "teams: weeks to simulate (default: 8)");
  cmd->add_option("--seed", flags->teams.seed, "teams: workload seed (default: 42)");
  cmd->add_option("--sprint-probability", flags->teams.sprint_probability,
                  "teams: chance a team's week is a sprint (default: 0.3)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--burst", flags->teams.burst_factor,
                  "teams: a sprint's work as a multiple of the team's quota (default: 3)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--policy", flags->policy,
                  absl::StrCat("Placement policy: ", PolicyNameList("|"), " (default: gpupool's own)"))
      ->check(UnknownPolicy);
  cmd->add_option("--seeds", flags->seeds, "Seeds: A-B or A,B,... (default: 42-51)");
  cmd->add_option("--tune", flags->tune,
                  "Inflate or deflate the workload to RATIO x the cluster's GPUs (default: 1.3)");
  cmd->add_option("--tie-order", flags->tie_order,
                  "Equal scores go to the first node by name, or by a per-seed random order as in "
                  "the paper's simulator (default: name)")
      ->check(CLI::IsMember({"name", "shuffled"}));
  cmd->add_flag("--timed", flags->timed,
                "Replay in time with departures: utilisation over time, queueing delay, JCT, "
                "preemptions (LS pods may evict BE pods)");
  cmd->add_option("--compress", flags->compress,
                  "--timed: divide arrival times by F (runtimes unchanged) to raise the load");
  cmd->add_flag("--json", flags->json, "Print JSON instead of a table");
  cmd->add_option("--compare", flags->compare,
                  "Trace protocol: more policies (comma-separated) replayed on the same seeds, for "
                  "the table and --html")
      ->check([](const std::string& list) {
        for (absl::string_view p : absl::StrSplit(list, ',', absl::SkipEmpty())) {
          if (std::string problem = UnknownPolicy(std::string(p)); !problem.empty()) return problem;
        }
        return std::string();
      });
  cmd->add_option("--html", flags->html,
                  "Also write a self-contained HTML page: the allocation curves (trace protocol), "
                  "or utilisation day by day (--workload teams)");
  cmd->callback([flags] {
    if ((flags->workload == "teams" || flags->timed) && !flags->compare.empty()) {
      throw CommandFailed("simulate: --compare applies to the trace protocol replay only", 2);
    }
    if (flags->timed && !flags->html.empty()) {
      throw CommandFailed("simulate: --html applies to the trace protocol replay and --workload teams", 2);
    }
    if (flags->workload == "teams") {
      flags->teams.json = flags->json;
      flags->teams.html = flags->html;
      RunTeamsSimulation(flags->teams);
      return;
    }
    if (flags->nodes.empty() || flags->pods.empty()) {
      throw CommandFailed("simulate: the trace workload needs --nodes FILE and --pods FILE", 2);
    }
    if (flags->timed) {
      RunTimedSimulation({flags->nodes, flags->pods, flags->policy, flags->json, flags->compress});
      return;
    }
    RunSimulate(*flags);
  });
}

}  // namespace gpupool::cli
