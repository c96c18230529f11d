// `gpupool savings`: what pooling saved over a period, from a running head's ledger
// (runtime/service/savings_report.h): each team's peak and p95 concurrent GPUs per model, the
// dedicated fleets those would have needed, against the pooled fleet, with both utilisations.
//
//   gpupool savings --pool 127.0.0.1:7070 --token-file ops.token --since -30d
//   gpupool savings ... --since 2025-01-01 --until 2025-02-01 --json
//   gpupool savings ... --since -7d --html savings.html
#include <chrono>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/cli/command.h"
#include "runtime/cli/head_address.h"
#include "runtime/cli/text_table.h"
#include "runtime/cli/time_arg.h"
#include "runtime/client/head_report.h"

namespace gpupool::cli {
namespace {

using nlohmann::json;

struct SavingsFlags {
  HeadFlags head;
  std::string since = "-30d";
  std::string until = "now";
  bool json = false;
  std::string html;
};

std::string Money(const json& cents) { return absl::StrFormat("%.2f", cents.get<int64_t>() / 100.0); }

void RunSavings(const SavingsFlags& flags) {
  HeadAddress head = ResolveHead(flags.head);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  absl::StatusOr<double> since = ParseTimeArg(flags.since, now);
  if (!since.ok()) throw CommandFailed(absl::StrCat("--since: ", since.status().message()));
  absl::StatusOr<double> until = ParseTimeArg(flags.until, now);
  if (!until.ok()) throw CommandFailed(absl::StrCat("--until: ", until.status().message()));
  if (*since >= *until) throw CommandFailed(absl::StrFormat("the period is empty: it starts at %.0f and ends at %.0f", *since, *until));
  absl::StatusOr<std::string> text = runtime::FetchHeadSavings(head.host, head.port, head.token, *since, *until);
  if (!text.ok()) throw CommandFailed(std::string(text.status().message()));
  json r = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (r.is_discarded() || !r.is_object()) throw CommandFailed("the head sent a savings report that is not JSON");
  if (flags.json) {
    std::cout << r.dump(2) << "\n";
    return;
  }
  TextTable teams({"TEAM", "MODEL", "GPU-HOURS", "PEAK", "P95", "OWN@PEAK", "OWN@P95", "COST@PEAK", "COST@P95"});
  for (const json& t : r["teams"]) {
    teams.AddRow({t["team"], t["model"], absl::StrFormat("%.3f", t["gpu_hours"].get<double>()),
                  absl::StrFormat("%.2f", t["peak_gpus"].get<double>()), absl::StrFormat("%.2f", t["p95_gpus"].get<double>()),
                  absl::StrFormat("%.0f", t["dedicated_gpus_peak"].get<double>()),
                  absl::StrFormat("%.0f", t["dedicated_gpus_p95"].get<double>()), Money(t["dedicated_cost_peak_cents"]),
                  Money(t["dedicated_cost_p95_cents"])});
  }
  TextTable fleets({"FLEET", "GPUS", "COST-USD", "UTILISATION"});
  for (const auto& [name, key] : {std::pair<const char*, const char*>{"pooled", "pooled"},
                                  {"dedicated (peak)", "dedicated_peak"}, {"dedicated (p95)", "dedicated_p95"}}) {
    const json& f = r[key];
    fleets.AddRow({name, absl::StrFormat("%.0f", f["gpus"].get<double>()), Money(f["cost_cents"]),
                   absl::StrFormat("%.1f%%", 100 * f["utilisation"].get<double>())});
  }
  std::string summary = absl::StrFormat("%.3f GPU-hours used; pooling saved %s USD against fleets sized for each "
                                        "team's peak, %s USD against fleets sized for its p95",
                                        r["used_gpu_hours"].get<double>(), Money(r["saved_vs_peak_cents"]),
                                        Money(r["saved_vs_p95_cents"]));
  if (!flags.html.empty()) {
    std::ofstream out(flags.html);
    if (!out) throw CommandFailed(absl::StrCat("cannot write '", flags.html, "'"));
    out << "<!doctype html><html><head><meta charset=\"utf-8\"><title>gpupool savings</title></head><body>\n"
        << "<h1>gpupool savings</h1>\n<p>" << summary << "</p>\n<h2>Teams</h2>\n" << teams.RenderHtml()
        << "<h2>Fleets</h2>\n" << fleets.RenderHtml() << "</body></html>\n";
  }
  std::cout << teams.Render() << "\n" << fleets.Render() << summary << "\n";
}

}  // namespace

void RegisterSavingsCommand(CLI::App& app) {
  auto flags = std::make_shared<SavingsFlags>();
  CLI::App* s = app.add_subcommand("savings", "What pooling saved against dedicated fleets, from the head's ledger");
  AddHeadFlags(s, flags->head);
  s->add_option("--since", flags->since, "period start: Unix seconds, ISO 8601 or relative (default -30d)");
  s->add_option("--until", flags->until, "period end (default now)");
  s->add_flag("--json", flags->json, "the report as JSON");
  s->add_option("--html", flags->html, "also write the report as an HTML page to FILE");
  s->callback([flags] { RunSavings(*flags); });
}

}  // namespace gpupool::cli
