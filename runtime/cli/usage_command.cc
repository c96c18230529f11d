// `gpupool usage`: GPU-hours and chargeback from a running head's ledger, like Slurm's sacct.
// The head groups, prices and filters (runtime/service/usage_report.h): the operators' token
// sees every team, a team's token its own rows plus one line for the other teams.
//
//   gpupool usage --pool 127.0.0.1:7070 --token-file ops.token --by cost-center --since -7d --cost
//   gpupool usage ... --since 2025-01-01 --until 2025-02-01 --cost --format csv --idle share
//
// Capacity (every declared GPU for the whole period), `unavailable` (GPUs lost or drained) and
// `idle` are shown with --cost, which needs a bounded period (--since or --from).
#include <chrono>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/cli/command.h"
#include "runtime/cli/head_address.h"
#include "runtime/cli/text_table.h"
#include "runtime/cli/time_arg.h"
#include "runtime/client/head_report.h"

namespace gpupool::cli {
namespace {

using nlohmann::json;

struct UsageFlags {
  HeadFlags head;
  bool json = false;
  std::string format = "table";
  double from_s = 0;  // --from (Unix seconds), kept for scripts
  double to_s = 0;    // --to; 0: now
  std::string since;  // --since: any form ParseTimeArg reads
  std::string until;
  std::string by = "team";
  bool cost = false;
  std::string idle = "apart";
};

std::string Money(const json& cents) { return absl::StrFormat("%.2f", cents.get<int64_t>() / 100.0); }

// One CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void RunUsage(const UsageFlags& flags) {
  HeadAddress head = ResolveHead(flags.head);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double from = flags.from_s;
  double to = flags.to_s > 0 ? flags.to_s : now;
  if (!flags.since.empty()) {
    absl::StatusOr<double> t = ParseTimeArg(flags.since, now);
    if (!t.ok()) throw CommandFailed(absl::StrCat("--since: ", t.status().message()));
    from = *t;
  }
  if (!flags.until.empty()) {
    absl::StatusOr<double> t = ParseTimeArg(flags.until, now);
    if (!t.ok()) throw CommandFailed(absl::StrCat("--until: ", t.status().message()));
    to = *t;
  }
  if (from >= to) throw CommandFailed(absl::StrFormat("the period is empty: it starts at %.0f and ends at %.0f", from, to));
  if (flags.cost && from <= 0) {
    throw CommandFailed("--cost needs a bounded period (--since, e.g. -30d): capacity is charged for the whole period");
  }
  if (flags.idle != "apart" && flags.idle != "share") {
    throw CommandFailed(absl::StrCat("--idle must be 'apart' or 'share', not '", flags.idle, "'"));
  }
  std::string format = flags.json ? "json" : flags.format;
  if (format != "table" && format != "json" && format != "csv") {
    throw CommandFailed(absl::StrCat("--format must be table, json or csv, not '", format, "'"));
  }
  absl::StatusOr<std::string> text =
      runtime::FetchHeadUsage(head.host, head.port, head.token, from, to, flags.by, flags.idle == "share");
  if (!text.ok()) throw CommandFailed(std::string(text.status().message()));
  json report = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded() || !report.is_object()) throw CommandFailed("the head sent a usage report that is not JSON");
  if (format == "json") {
    std::cout << report.dump(2) << "\n";
    return;
  }
  // Rows, then (for a team's view) the other teams as one line, then unavailable and idle.
  std::vector<std::vector<std::string>> lines;
  auto add = [&](const std::string& group, const json& r) {
    std::vector<std::string> line = {group, absl::StrFormat("%.3f", r["gpu_hours"].get<double>()),
                                     r.contains("leases") ? std::to_string(r["leases"].get<int64_t>()) : ""};
    // Busy versus leased (seff), over the leases whose job said how long they were busy; "-" when
    // none did, blank for capacity lines.
    const bool measured = r.contains("efficiency") && r["efficiency"].is_number();
    line.push_back(!r.contains("efficiency") ? "" : measured ? absl::StrFormat("%.3f", r["busy_gpu_hours"].get<double>()) : "-");
    line.push_back(!r.contains("efficiency") ? "" : measured ? absl::StrFormat("%.0f%%", 100 * r["efficiency"].get<double>()) : "-");
    if (flags.cost) line.push_back(Money(r["cost_cents"]));
    lines.push_back(std::move(line));
  };
  double used = 0;
  for (const json& r : report["rows"]) {
    add(r["group"].get<std::string>(), r);
    used += r["gpu_hours"].get<double>();
  }
  if (report.contains("other_teams")) add("(other teams)", report["other_teams"]);
  if (flags.cost && report.contains("capacity")) {
    add("(unavailable)", report["unavailable"]);
    add("(idle)", report["idle"]);
  }
  std::vector<std::string> header = {absl::AsciiStrToUpper(flags.by), "GPU-HOURS", "LEASES", "BUSY-HOURS", "EFFICIENCY"};
  if (flags.cost) header.push_back("COST-USD");
  if (format == "csv") {
    std::vector<std::string> h;
    for (const std::string& c : header) h.push_back(absl::AsciiStrToLower(c));
    std::cout << absl::StrJoin(h, ",") << "\n";
    for (const auto& line : lines) {
      std::vector<std::string> fields;
      for (const std::string& f : line) fields.push_back(CsvField(f));
      std::cout << absl::StrJoin(fields, ",") << "\n";
    }
    return;
  }
  TextTable table(header);
  for (auto& line : lines) table.AddRow(line);
  std::cout << table.Render();
  std::cout << absl::StrFormat("%.3f GPU-hours (slice-weighted) in the period", used);
  if (flags.cost && report.contains("capacity")) {
    std::cout << absl::StrFormat("; capacity %.3f GPU-hours, %s USD; utilisation %.1f%%",
                                 report["capacity"]["gpu_hours"].get<double>(), Money(report["capacity"]["cost_cents"]),
                                 100.0 * report["utilisation"].get<double>());
  }
  std::cout << "\n";
}

}  // namespace

void RegisterUsageCommand(CLI::App& app) {
  auto flags = std::make_shared<UsageFlags>();
  CLI::App* u = app.add_subcommand("usage", "GPU-hours and their cost from the head's ledger (like sacct)");
  AddHeadFlags(u, flags->head);
  u->add_flag("--json", flags->json, "the head's report as JSON (same as --format json)");
  u->add_option("--format", flags->format, "table, json or csv");
  u->add_option("--from", flags->from_s, "period start, Unix seconds (default: the beginning)");
  u->add_option("--to", flags->to_s, "period end, Unix seconds (default: now)");
  u->add_option("--since", flags->since, "period start: Unix seconds, ISO 8601 (2025-01-01) or relative (-7d)");
  u->add_option("--until", flags->until, "period end, as --since (default: now)");
  u->add_option("--by", flags->by, "team, project, class, workload, model, cost-center or job");
  u->add_flag("--cost", flags->cost, "price the GPU-hours and show capacity, unavailable and idle");
  u->add_option("--idle", flags->idle, "apart (idle is its own line) or share (spread over the rows by use)");
  u->callback([flags] { RunUsage(*flags); });
}

}  // namespace gpupool::cli
