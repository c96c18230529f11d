#include "runtime/service/usage_report.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pool/gpu_catalogue.h"

namespace gpupool::runtime {
namespace {

using nlohmann::json;

double PricePerHour(const pool::PoolConfig& config, const std::string& model_name) {
  const pool::GpuModel* model = pool::FindGpuModel(model_name);
  return model == nullptr ? 0.0 : config.PricePerHour(*model);
}

// The value of the grouping column for one cell; false for an unknown grouping.
bool GroupOf(const UsageCell& c, const std::string& by, const pool::PoolConfig& config, std::string* out) {
  if (by == "team") {
    *out = c.team;
  } else if (by == "project") {
    *out = c.project;
  } else if (by == "class") {
    *out = c.priority_class;
  } else if (by == "workload") {
    *out = c.workload_class;
  } else if (by == "model") {
    *out = c.gpu_model;
  } else if (by == "job") {
    // Leases closed before the journal kept their job (schema 4) have none to name.
    *out = c.job.empty() ? "(not recorded)" : c.job;
  } else if (by == "cost-center") {
    const pool::Team* team = config.scheduling.FindTeam(c.team);
    *out = team != nullptr && !team->cost_center.empty() ? team->cost_center : c.team;
  } else {
    return false;
  }
  return true;
}

struct Row {
  double gpu_hours = 0;
  double measured_gpu_hours = 0;  // of gpu_hours, those whose job said how long they were busy
  double busy_gpu_hours = 0;
  int64_t leases = 0;
  double cost_usd = 0;  // unrounded
  int64_t cents = 0;
};

// Efficiency (Slurm's seff) is busy over leased, of the leases whose busy time is known; null when
// none is (leases still running, closed before the ledger kept it, or by a job that did not say).
json RowJson(const std::string& group, const Row& r) {
  json efficiency = r.measured_gpu_hours > 0 ? json(r.busy_gpu_hours / r.measured_gpu_hours) : json(nullptr);
  return {{"group", group}, {"gpu_hours", r.gpu_hours}, {"leases", r.leases}, {"cost", r.cents / 100.0},
          {"cost_cents", r.cents}, {"busy_gpu_hours", r.busy_gpu_hours},
          {"measured_gpu_hours", r.measured_gpu_hours}, {"efficiency", efficiency}};
}

}  // namespace

int64_t RoundCentsHalfEven(double usd) {
  // nearbyint rounds in the current mode, which is round-half-to-even unless someone changed it;
  // std::round would round halves away from zero, which biases a bill that many rows sum up.
  return static_cast<int64_t>(std::nearbyint(usd * 100.0));
}

absl::StatusOr<json> UsageReport(const std::vector<UsageCell>& cells, const UsageQuery& query, const Viewer& viewer,
                                 const pool::PoolConfig& config, const UsageCapacity& capacity) {
  std::string probe;
  if (!GroupOf(UsageCell{}, query.group_by, config, &probe)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot group usage by '", query.group_by, "' (", kUsageGroupings, ")"));
  }
  if (!(query.from_s < query.to_s)) {
    return absl::InvalidArgumentError(absl::StrCat("usage period [", query.from_s, ", ", query.to_s,
                                                   ") is empty: the start must precede the end"));
  }
  std::map<std::string, Row> rows;
  Row others;  // what the viewer may not see row by row
  for (const UsageCell& c : cells) {
    double cost = c.gpu_hours * PricePerHour(config, c.gpu_model);
    Row* row = &others;
    if (viewer.Sees(c.team)) {
      std::string group;
      GroupOf(c, query.group_by, config, &group);
      row = &rows[group];
    }
    row->gpu_hours += c.gpu_hours;
    row->measured_gpu_hours += c.measured_gpu_hours;
    row->busy_gpu_hours += c.busy_gpu_hours;
    row->leases += c.leases;
    row->cost_usd += cost;
  }
  int64_t used_cents = 0;
  for (auto& [group, r] : rows) used_cents += r.cents = RoundCentsHalfEven(r.cost_usd);
  used_cents += others.cents = RoundCentsHalfEven(others.cost_usd);

  json report = {{"from_s", query.from_s}, {"to_s", query.to_s}, {"by", query.group_by}, {"currency", "USD"},
                 {"viewer", viewer.sees_everything() ? "pool" : viewer.team}};
  const bool bounded = query.from_s > 0;
  if (bounded) {
    double capacity_hours = 0, capacity_usd = 0, unavailable_hours = 0, unavailable_usd = 0;
    for (const auto& [model, hours] : capacity.declared_gpu_hours) {
      capacity_hours += hours;
      capacity_usd += hours * PricePerHour(config, model);
    }
    for (const auto& [model, hours] : capacity.unavailable_gpu_hours) {
      unavailable_hours += hours;
      unavailable_usd += hours * PricePerHour(config, model);
    }
    double used_hours = others.gpu_hours;
    for (const auto& [group, r] : rows) used_hours += r.gpu_hours;
    const int64_t capacity_cents = RoundCentsHalfEven(capacity_usd);
    const int64_t unavailable_cents = RoundCentsHalfEven(unavailable_usd);
    int64_t idle_cents = capacity_cents - used_cents - unavailable_cents;  // the remainder
    const double idle_hours = capacity_hours - used_hours - unavailable_hours;
    if (query.idle_share && used_cents > 0 && idle_cents > 0) {
      // Idle spread in proportion to each row's cost; rounding leftovers stay idle.
      const int64_t to_share = idle_cents;
      auto share = [&](Row& r) {
        int64_t part = RoundCentsHalfEven(static_cast<double>(to_share) * r.cents / used_cents / 100.0);
        r.cents += part;
        idle_cents -= part;
      };
      for (auto& [group, r] : rows) share(r);
      share(others);
    }
    report["capacity"] = {{"gpu_hours", capacity_hours}, {"cost", capacity_cents / 100.0}, {"cost_cents", capacity_cents}};
    report["unavailable"] = {{"gpu_hours", unavailable_hours}, {"cost", unavailable_cents / 100.0},
                             {"cost_cents", unavailable_cents}};
    report["idle"] = {{"gpu_hours", idle_hours}, {"cost", idle_cents / 100.0}, {"cost_cents", idle_cents},
                      {"shared", query.idle_share}};
    report["utilisation"] = capacity_hours > 0 ? used_hours / capacity_hours : 0.0;
  }
  json out = json::array();
  for (const auto& [group, r] : rows) out.push_back(RowJson(group, r));
  report["rows"] = out;
  if (!viewer.sees_everything()) report["other_teams"] = RowJson("other teams", others);
  return report;
}

}  // namespace gpupool::runtime
