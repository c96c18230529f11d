// `gpupool status` and `gpupool queue`: the views of a running head, like Slurm's sinfo and
// squeue. Both read the head's report (runtime/client/head_report.h) and print a table, or the
// report itself with --json. The operators' (or the agents') token sees the whole pool; a team's
// token sees every node and GPU, the pool's totals, and its own team's leases and requests.
//
//   gpupool status --pool 127.0.0.1:7070 --token-file team.token
//   gpupool queue  --pool 127.0.0.1:7070 --token-file team.token --json
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/cli/command.h"
#include "runtime/cli/head_address.h"
#include "runtime/cli/status_reasons.h"
#include "runtime/cli/text_table.h"
#include "runtime/client/head_report.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::cli {
namespace {

using nlohmann::json;

struct ViewFlags {
  HeadFlags head;
  bool json = false;
  bool reasons = false;  // status: the unhealthy or drained GPUs with why (status_reasons.cc)
};

json Parse(const std::string& text) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) throw CommandFailed("the head sent a report that is not JSON");
  return parsed;
}

// The spare reserves (the configuration's `reserve:`), one line each, under both tables:
//   reserve H100-80GB: 2 GPUs for urgent and above; 1 spare now of 64 (refilling: 1 lease revoked)
// A spare GPU is healthy and entirely free (pool/scheduler/spare_reserve.h).
// A head older than the reserve sends none.
void PrintReserves(const json& report) {
  if (!report.contains("reserve")) return;
  for (const json& r : report["reserve"]) {
    const int gpus = r["gpus"].get<int>(), spare = r["spare_gpus"].get<int>();
    const int refilling = r.value("refilling_leases", 0);
    std::cout << "reserve " << r["group"].get<std::string>() << ": " << gpus << (gpus == 1 ? " GPU" : " GPUs") << " for "
              << r["for_priority_at_least"].get<std::string>() << " and above; " << spare << " spare now of "
              << r["group_gpus"].get<int>();
    if (spare < gpus) {
      std::cout << (refilling > 0 ? absl::StrCat(" (refilling: ", refilling, refilling == 1 ? " lease" : " leases",
                                                 " revoked)")
                                  : std::string(" (short, nothing to reclaim: its GPUs are out of service or held "
                                                "by work within quota or of its classes)"));
    }
    std::cout << "\n";
  }
}

json FetchReport(const ViewFlags& flags) {
  HeadAddress head = ResolveHead(flags.head);
  absl::StatusOr<std::string> report = runtime::FetchHeadReport(head.host, head.port, head.token);
  if (!report.ok()) throw CommandFailed(std::string(report.status().message()));
  return Parse(*report);
}

void RunStatus(const ViewFlags& flags) {
  json report = FetchReport(flags);
  if (flags.reasons) {
    PrintHealthReasons(report, flags.json);
    return;
  }
  if (flags.json) {
    std::cout << report.dump(2) << "\n";
    return;
  }
  TextTable table({"NODE", "AGENT", "GPU", "MODEL", "MEMORY", "HEALTH", "LEASES"});
  int up = 0, gpus = 0, leased = 0;
  for (const json& node : report["nodes"]) {
    up += node["up"].get<bool>();
    for (const json& gpu : node["gpus"]) {
      ++gpus;
      leased += !gpu["leases"].empty();
      table.AddRow({node["name"], node["agent"], std::to_string(gpu["index"].get<int>()), gpu["model"],
                    absl::StrCat(gpu["memory_mib"].get<uint64_t>(), " MiB"), gpu["health"],
                    gpu["leases"].empty() ? "-" : std::to_string(gpu["leases"].size())});
    }
  }
  std::cout << table.Render();
  std::cout << report["nodes"].size() << " nodes (" << up << " up), " << gpus << " GPUs (" << leased
            << " with leases); pool time " << absl::StrFormat("%.0f", report["pool_time_s"].get<double>())
            << " s; driver " << report["driver"].get<std::string>() << "\n";
  PrintReserves(report);
}

void RunQueue(const ViewFlags& flags) {
  json report = FetchReport(flags);
  if (flags.json) {
    json out = {{"leases", report["leases"]}, {"pending", report["pending"]},
                {"reserve", report.contains("reserve") ? report["reserve"] : json::array()}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  // AT RISK: pool seconds since the lease's last committed snapshot (or its start): the work a
  // preemption would throw away now, which the scheduler minimises when it picks victims.
  // KEPT: a lease held for its job while the job is away (a lost connection, a head restart),
  // until it reclaims it or the reclaim window ends; a pending request kept so says "job away".
  TextTable table({"STATE", "ID", "TEAM", "PROJECT", "CLASS", "GPUS", "SHARE", "BORROWED", "AT RISK", "REASON"});
  const double now = report["pool_time_s"].get<double>();
  for (const json& l : report["leases"]) {
    std::vector<std::string> where;
    for (const json& g : l["gpus"]) where.push_back(g.get<std::string>());
    const char* state = l.value("job_away", false) ? "KEPT" : l["revoking"].get<bool>() ? "REVOKING" : "RUNNING";
    table.AddRow({state, l["lease"], l["team"], l["project"],
                  l["priority_class"], absl::StrJoin(where, ","), absl::StrFormat("%.3g", l["gpu_share"].get<double>()),
                  l["borrowing"].get<bool>() ? "yes" : "no",
                  absl::StrFormat("%.0f s", std::max(0.0, now - l["last_checkpoint_s"].get<double>())), "-"});
  }
  for (const json& p : report["pending"]) {
    std::string reason = p["reason"].get<std::string>();
    if (p.value("job_away", false)) reason += " (job away)";
    table.AddRow({"PENDING", p["request"], p["team"], "", "", "", "", "", "", reason});
  }
  std::cout << table.Render();
  std::cout << report["leases"].size() << " running, " << report["pending"].size() << " pending";
  if (report.contains("totals") && report.value("viewer", "pool") != "pool") {
    std::cout << " for team " << report["viewer"].get<std::string>() << " (pool: " << report["totals"]["leases"]
              << " running, " << report["totals"]["pending"] << " pending)";
  }
  std::cout << "\n";
  PrintReserves(report);
}

void AddViewFlags(CLI::App* app, ViewFlags& flags) {
  AddHeadFlags(app, flags.head);
  app->add_flag("--json", flags.json, "the head's report as JSON");
}

}  // namespace

void RegisterStatusCommands(CLI::App& app) {
  auto status = std::make_shared<ViewFlags>();
  CLI::App* s = app.add_subcommand("status", "Nodes, agents, GPUs and their health on a running head (like sinfo)");
  AddViewFlags(s, *status);
  s->add_flag("--reasons", status->reasons,
              "only the GPUs out of service or degraded, with why, since when and who drained them (like sinfo -R)");
  s->callback([status] { RunStatus(*status); });
  auto queue = std::make_shared<ViewFlags>();
  CLI::App* q = app.add_subcommand("queue", "Running leases and pending requests with their reasons (like squeue)");
  AddViewFlags(q, *queue);
  q->callback([queue] { RunQueue(*queue); });
}

}  // namespace gpupool::cli
