#include "runtime/service/head_report_json.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "pool/scheduler/wait_reason.h"
#include "runtime/service/job_session.h"
#include "runtime/service/sampled_unavailability.h"
#include "runtime/service/savings_report.h"

namespace gpupool::runtime {

std::string TeamOfRequest(const HeadView& view, const std::string& request_id) {
  const auto& by_request = view.sessions.by_request();
  if (auto it = by_request.find(request_id); it != by_request.end()) return it->second->team();
  const ReclaimBook::KeptRequest* kept = view.kept.FindRequest(request_id);
  return kept == nullptr ? std::string() : kept->team;
}

namespace {

// The GPU's health as its state machine has it (pool/health_machine.h); times in Unix seconds,
// null where there is none (no diagnostic yet).
void AddHealthDetails(const std::optional<GpuHealthDetails>& d, nlohmann::json& gpu) {
  if (!d.has_value()) return;
  gpu["health"] = std::string(pool::HealthStateName(d->state));
  gpu["health_reasons"] = d->reasons;
  gpu["health_since_s"] = d->since_s;
  gpu["last_diagnostic_s"] = d->last_diagnostic_s.has_value() ? nlohmann::json(*d->last_diagnostic_s) : nlohmann::json();
  gpu["last_diagnostic_result"] = d->last_diagnostic == pool::DiagnosticResult::kNone
                                      ? nlohmann::json()
                                      : nlohmann::json(pool::DiagnosticResultName(d->last_diagnostic));
  gpu["drained_by"] = d->drained_by.empty() ? nlohmann::json() : nlohmann::json(d->drained_by);
  gpu["drain_reason"] = d->drain_reason.empty() ? nlohmann::json() : nlohmann::json(d->drain_reason);
}

// `leases` are those the viewer may see: a GPU lists only those.
nlohmann::json NodesJson(const HeadView& view, const std::vector<pool::Lease>& leases) {
  using nlohmann::json;
  PoolService& pool = view.pool;
  std::map<std::string, std::vector<const pool::Lease*>> on_gpu;
  for (const pool::Lease& l : leases) {
    for (const pool::GpuRef& g : l.gpus) on_gpu[absl::StrCat(g.node, "/", g.index)].push_back(&l);
  }
  json nodes = json::array();
  for (const pool::InventoryNode& node : pool.inventory().nodes()) {
    json gpus = json::array();
    for (size_t position : node.gpu_positions) {
      const pool::InventoryGpu& gpu = pool.inventory().gpus()[position];
      json held = json::array();
      for (const pool::Lease* l : on_gpu[absl::StrCat(gpu.ref.node, "/", gpu.ref.index)]) held.push_back(l->id);
      json entry = {{"index", gpu.ref.index}, {"model", gpu.device.model}, {"memory_mib", gpu.device.memory_mib},
                    {"health", std::string(pool::HealthStateName(pool.health(gpu.ref)))}, {"leases", held}};
      AddHealthDetails(pool.HealthDetails(gpu.ref), entry);
      gpus.push_back(std::move(entry));
    }
    bool remote = pool.driver() == nullptr;
    std::string state = !remote ? "local" : std::string(view.agents.StateOf(node.name));
    nodes.push_back({{"name", node.name}, {"agent", state}, {"up", pool.node_up(node.name)}, {"gpus", gpus}});
  }
  return nodes;
}

}  // namespace

std::string HeadReportJson(const HeadView& view, const Viewer& viewer) {
  using nlohmann::json;
  PoolService& pool = view.pool;
  std::vector<pool::Lease> all_leases = pool.Leases();
  std::vector<pool::Lease> leases;
  for (pool::Lease& l : all_leases) {
    if (viewer.Sees(l.request.team)) leases.push_back(std::move(l));
  }
  json nodes = NodesJson(view, leases);
  json held = json::array();
  for (const pool::Lease& l : leases) {
    json where = json::array();
    for (const pool::GpuRef& g : l.gpus) where.push_back(absl::StrCat(g.node, "/", g.index));
    held.push_back({{"lease", l.id}, {"team", l.request.team}, {"project", l.request.project},
                    {"priority_class", l.request.priority_class}, {"gpus", where},
                    {"gpu_share", static_cast<double>(l.milli) / 1000.0}, {"borrowing", l.borrowing},
                    {"started_s", l.started_s}, {"last_checkpoint_s", l.last_checkpoint_s},
                    {"revoking", l.revoke_deadline_s.has_value()}, {"job_away", view.kept.KeepsLease(l.id)}});
  }
  json pending = json::array();
  std::vector<pool::PendingInfo> all_pending = pool.Pending();
  for (const pool::PendingInfo& p : all_pending) {
    std::string team = TeamOfRequest(view, p.request_id);
    if (!viewer.Sees(team)) continue;
    pending.push_back({{"request", p.request_id}, {"team", team},
                       {"reason", std::string(pool::WaitReasonName(p.reason))}, {"submitted_s", p.submitted_s},
                       {"job_away", view.kept.FindRequest(p.request_id) != nullptr}});
  }
  // The spare reserves (the configuration's `reserve:`): pool-wide, like the nodes.
  json reserves = json::array();
  for (const pool::ReserveStatus& r : pool.Reserves()) {
    reserves.push_back({{"group", r.group}, {"gpus", r.gpus}, {"for_priority_at_least", r.for_class},
                        {"spare_gpus", r.spare_gpus}, {"group_gpus", r.group_gpus},
                        {"refilling_leases", r.refilling_leases}});
  }
  json report = {{"pool_time_s", pool.Now()}, {"driver", pool.driver_name()}, {"capacity_gpus", pool.capacity_gpus()},
                 {"nodes", nodes}, {"leases", held}, {"pending", pending}, {"reserve", reserves},
                 {"totals", {{"leases", all_leases.size()}, {"pending", all_pending.size()}}},
                 {"viewer", viewer.sees_everything() ? "pool" : viewer.team}};
  return report.dump();
}

absl::StatusOr<std::string> UsageJson(HeadJournal* journal, PoolService& pool, const UsageQuery& query,
                                      const Viewer& viewer, double history_interval_s) {
  if (journal == nullptr) {
    return absl::FailedPreconditionError("this head keeps no journal (start it with --journal PATH)");
  }
  if (absl::Status flushed = journal->Flush(); !flushed.ok()) return flushed;
  absl::StatusOr<std::vector<UsageCell>> cells = journal->UsageCells(query.from_s, query.to_s);
  if (!cells.ok()) return cells.status();
  UsageCapacity capacity;
  if (query.from_s > 0 && query.from_s < query.to_s) {
    const double hours = (query.to_s - query.from_s) / 3600.0;
    std::map<std::string, int> declared;
    for (const pool::InventoryGpu& gpu : pool.inventory().gpus()) {
      capacity.declared_gpu_hours[gpu.device.model] += hours;
      ++declared[gpu.device.model];
    }
    // The samples from two intervals before the period: the one in force at its start counts.
    std::vector<HistoryRow> rows;
    if (history_interval_s > 0) {
      absl::StatusOr<std::vector<HistoryRow>> history =
          journal->PoolWideHistory(query.from_s - 2 * history_interval_s, query.to_s);
      if (!history.ok()) return history.status();
      rows = *std::move(history);
    }
    SampledUnavailability sampled =
        UnavailableFromHistory(rows, declared, query.from_s, query.to_s, history_interval_s);
    capacity.unavailable_gpu_hours = std::move(sampled.gpu_hours);
    for (const auto& [start, end] : sampled.unsampled) {
      for (const auto& [model, h] : pool.UnavailableGpuHours(start, end)) capacity.unavailable_gpu_hours[model] += h;
    }
  }
  absl::StatusOr<nlohmann::json> report = UsageReport(*cells, query, viewer, pool.config(), capacity);
  if (!report.ok()) return report.status();
  return report->dump();
}

absl::StatusOr<std::string> SavingsJson(HeadJournal* journal, PoolService& pool, double from_s, double to_s,
                                        const Viewer& viewer) {
  if (journal == nullptr) {
    return absl::FailedPreconditionError("this head keeps no journal (start it with --journal PATH)");
  }
  if (!(from_s < to_s)) {
    return absl::InvalidArgumentError(absl::StrCat("savings period [", from_s, ", ", to_s, ") is empty"));
  }
  if (absl::Status flushed = journal->Flush(); !flushed.ok()) return flushed;
  absl::StatusOr<std::vector<LedgerEntry>> closed = journal->Ledger(from_s, to_s);
  if (!closed.ok()) return closed.status();
  absl::StatusOr<HeadState> state = journal->Load();  // the leases open now
  if (!state.ok()) return state.status();
  std::vector<HoldInterval> holds;
  for (const LedgerEntry& e : *closed) {
    holds.push_back({e.account.team, e.account.gpu_model, e.account.gpus, e.start_s, e.end_s});
  }
  for (const LeaseRecord& l : state->leases) {
    holds.push_back({l.account.team, l.account.gpu_model, l.account.gpus, l.granted_s, to_s});
  }
  std::map<std::string, int> declared;
  for (const pool::InventoryGpu& gpu : pool.inventory().gpus()) ++declared[gpu.device.model];
  absl::StatusOr<nlohmann::json> report = SavingsReport(holds, from_s, to_s, viewer, pool.config(), declared);
  if (!report.ok()) return report.status();
  return report->dump();
}

}  // namespace gpupool::runtime
