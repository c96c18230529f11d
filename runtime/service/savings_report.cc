#include "runtime/service/savings_report.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pool/gpu_catalogue.h"
#include "runtime/service/usage_report.h"

namespace gpupool::runtime {
namespace {

using nlohmann::json;

double Price(const pool::PoolConfig& config, const std::string& model) {
  const pool::GpuModel* m = pool::FindGpuModel(model);
  return m == nullptr ? 0.0 : config.PricePerHour(*m);
}

struct Levels {
  double peak = 0;
  double p95 = 0;
  double gpu_hours = 0;
};

// The concurrent GPUs over [from, to) of one team's holds of one model: a sweep over their edges,
// then the time spent at each level.
Levels Sweep(const std::vector<const HoldInterval*>& holds, double from, double to) {
  std::vector<std::pair<double, double>> edges;  // time, change
  Levels out;
  for (const HoldInterval* h : holds) {
    double start = std::max(h->start_s, from), end = std::min(h->end_s, to);
    if (end <= start) continue;
    edges.push_back({start, h->gpus});
    edges.push_back({end, -h->gpus});
    out.gpu_hours += (end - start) * h->gpus / 3600.0;
  }
  std::sort(edges.begin(), edges.end());
  std::vector<std::pair<double, double>> time_at;  // level, seconds
  double level = 0, at = from;
  for (const auto& [t, change] : edges) {
    if (t > at) time_at.push_back({level, t - at});
    at = t;
    level += change;
    out.peak = std::max(out.peak, level);
  }
  if (to > at) time_at.push_back({std::max(0.0, level), to - at});
  std::sort(time_at.begin(), time_at.end());
  double covered = 0;
  for (const auto& [l, seconds] : time_at) {
    covered += seconds;
    if (covered >= 0.95 * (to - from) - 1e-9) {
      out.p95 = l;
      break;
    }
  }
  return out;
}

// Whole GPUs to own for a level (slice-weighted holds round up; a float's dust does not).
double Owned(double level) { return std::ceil(level - 1e-9); }

}  // namespace

absl::StatusOr<json> SavingsReport(const std::vector<HoldInterval>& holds, double from_s, double to_s,
                                   const Viewer& viewer, const pool::PoolConfig& config,
                                   const std::map<std::string, int>& declared) {
  if (!(from_s < to_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("savings period [", from_s, ", ", to_s, ") is empty: the start must precede the end"));
  }
  const double hours = (to_s - from_s) / 3600.0;
  std::map<std::pair<std::string, std::string>, std::vector<const HoldInterval*>> by_team_model;
  for (const HoldInterval& h : holds) by_team_model[{h.team, h.model}].push_back(&h);
  json rows = json::array();
  double used = 0, dedicated_peak_gpus = 0, dedicated_p95_gpus = 0;
  int64_t peak_cents = 0, p95_cents = 0;
  for (const auto& [key, list] : by_team_model) {
    const auto& [team, model] = key;
    Levels l = Sweep(list, from_s, to_s);
    used += l.gpu_hours;
    const double price = Price(config, model);
    const int64_t row_peak = RoundCentsHalfEven(Owned(l.peak) * hours * price);
    const int64_t row_p95 = RoundCentsHalfEven(Owned(l.p95) * hours * price);
    dedicated_peak_gpus += Owned(l.peak);
    dedicated_p95_gpus += Owned(l.p95);
    peak_cents += row_peak;
    p95_cents += row_p95;
    if (!viewer.Sees(team)) continue;
    rows.push_back({{"team", team}, {"model", model}, {"gpu_hours", l.gpu_hours}, {"peak_gpus", l.peak},
                    {"p95_gpus", l.p95}, {"dedicated_gpus_peak", Owned(l.peak)}, {"dedicated_gpus_p95", Owned(l.p95)},
                    {"dedicated_cost_peak_cents", row_peak}, {"dedicated_cost_p95_cents", row_p95}});
  }
  double pooled_gpus = 0, pooled_usd = 0;
  for (const auto& [model, count] : declared) {
    pooled_gpus += count;
    pooled_usd += count * hours * Price(config, model);
  }
  const int64_t pooled_cents = RoundCentsHalfEven(pooled_usd);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  return json{{"from_s", from_s}, {"to_s", to_s}, {"currency", "USD"},
              {"viewer", viewer.sees_everything() ? "pool" : viewer.team}, {"teams", rows},
              {"used_gpu_hours", used},
              {"pooled", {{"gpus", pooled_gpus}, {"cost_cents", pooled_cents}, {"utilisation", ratio(used, pooled_gpus * hours)}}},
              {"dedicated_peak", {{"gpus", dedicated_peak_gpus}, {"cost_cents", peak_cents},
                                  {"utilisation", ratio(used, dedicated_peak_gpus * hours)}}},
              {"dedicated_p95", {{"gpus", dedicated_p95_gpus}, {"cost_cents", p95_cents},
                                 {"utilisation", ratio(used, dedicated_p95_gpus * hours)}}},
              {"saved_vs_peak_cents", peak_cents - pooled_cents}, {"saved_vs_p95_cents", p95_cents - pooled_cents}};
}

}  // namespace gpupool::runtime
