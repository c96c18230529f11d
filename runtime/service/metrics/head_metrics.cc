#include "runtime/service/metrics/head_metrics.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pool/health.h"
#include "runtime/http/prometheus_text.h"

namespace gpupool::runtime {
namespace {

constexpr pool::HealthState kStates[] = {pool::HealthState::kHealthy, pool::HealthState::kDegraded,
                                         pool::HealthState::kDraining, pool::HealthState::kQuarantined,
                                         pool::HealthState::kFailed, pool::HealthState::kLost};

void PoolWide(const PoolSnapshot& s, PrometheusText& out) {
  out.Family("gpupool_node_up", "gauge", "1 while the node's agent is connected (a local node: while it has GPUs)");
  for (const auto& [node, up] : s.node_up) out.Sample("gpupool_node_up", {{"node", node}}, up ? 1 : 0);

  out.Family("gpupool_gpu_health", "gauge", "1 for the GPU's current health state, 0 for the others");
  for (const PoolSnapshot::Gpu& g : s.gpus) {
    std::string index = std::to_string(g.index);
    for (pool::HealthState state : kStates) {
      out.Sample("gpupool_gpu_health",
                 {{"node", g.node}, {"gpu", index}, {"model", g.model}, {"state", pool::HealthStateName(state)}},
                 g.health == state ? 1 : 0);
    }
  }
  out.Family("gpupool_gpu_allocated_ratio", "gauge", "share of the GPU held by leases (slice-weighted), 0 to 1");
  for (const PoolSnapshot::Gpu& g : s.gpus) {
    out.Sample("gpupool_gpu_allocated_ratio", {{"node", g.node}, {"gpu", std::to_string(g.index)}, {"model", g.model}},
               g.allocated);
  }
  out.Family("gpupool_scheduler_cycle_duration_seconds", "histogram", "real time each scheduling cycle took");
  out.HistogramSamples("gpupool_scheduler_cycle_duration_seconds", {}, s.counters.cycle_seconds);
}

// gpu_seconds with each team's projects beyond its top kTopProjects folded into "other".
std::map<PoolMetrics::UsageKey, double> CapProjects(const std::map<PoolMetrics::UsageKey, double>& in) {
  std::map<std::pair<std::string, std::string>, double> by_project;  // (team, project)
  for (const auto& [key, v] : in) by_project[{std::get<0>(key), std::get<1>(key)}] += v;
  std::map<std::string, std::vector<std::pair<double, std::string>>> ranked;
  for (const auto& [tp, v] : by_project) {
    if (tp.second != "other") ranked[tp.first].push_back({-v, tp.second});  // "other" is not a name to rank
  }
  std::set<std::pair<std::string, std::string>> kept;
  for (auto& [team, list] : ranked) {
    std::sort(list.begin(), list.end());
    for (size_t i = 0; i < list.size() && i < kTopProjects; ++i) kept.insert({team, list[i].second});
  }
  std::map<PoolMetrics::UsageKey, double> out;
  for (const auto& [key, v] : in) {
    PoolMetrics::UsageKey k = key;
    if (!kept.contains({std::get<0>(key), std::get<1>(key)})) std::get<1>(k) = "other";
    out[k] += v;
  }
  return out;
}

void PerTeam(const PoolSnapshot& s, const Viewer& viewer, PrometheusText& out) {
  out.Family("gpupool_gpu_lease_info", "gauge", "1 per lease on a GPU");
  for (const PoolSnapshot::Gpu& g : s.gpus) {
    for (const PoolSnapshot::LeaseOnGpu& l : g.leases) {
      if (!viewer.Sees(l.team)) continue;
      out.Sample("gpupool_gpu_lease_info",
                 {{"node", g.node}, {"gpu", std::to_string(g.index)}, {"team", l.team}, {"job", l.job}, {"lease", l.lease}},
                 1);
    }
  }
  struct Gauge {
    const char* name;
    const char* help;
    double PoolSnapshot::TeamGroup::*field;
  };
  for (const Gauge& gauge : {Gauge{"gpupool_team_allocated_gpus", "GPUs the team's leases hold (slice-weighted)",
                                   &PoolSnapshot::TeamGroup::allocated_gpus},
                             Gauge{"gpupool_team_nominal_quota_gpus", "the team's guaranteed quota",
                                   &PoolSnapshot::TeamGroup::nominal_gpus},
                             Gauge{"gpupool_team_borrowed_gpus", "GPUs the team holds beyond its nominal quota",
                                   &PoolSnapshot::TeamGroup::borrowed_gpus}}) {
    out.Family(gauge.name, "gauge", gauge.help);
    for (const auto& [key, g] : s.teams) {
      if (viewer.Sees(key.first)) out.Sample(gauge.name, {{"team", key.first}, {"model_group", key.second}}, g.*gauge.field);
    }
  }
  out.Family("gpupool_pending_requests", "gauge", "requests waiting for a lease, by the reason the scheduler gives");
  for (const auto& [key, n] : s.pending) {
    const auto& [team, cls, reason] = key;
    if (viewer.Sees(team)) {
      out.Sample("gpupool_pending_requests", {{"team", team}, {"priority_class", cls}, {"reason", reason}},
                 static_cast<double>(n));
    }
  }
  out.Family("gpupool_admission_wait_seconds", "histogram", "pool seconds from a request's submission to its grant");
  for (const auto& [key, h] : s.counters.admission_wait) {
    if (viewer.Sees(key.first)) {
      out.HistogramSamples("gpupool_admission_wait_seconds", {{"team", key.first}, {"priority_class", key.second}}, h);
    }
  }
  out.Family("gpupool_preemptions_total", "counter", "leases revoked, by cause (reclaim, priority, drain, move)");
  for (const auto& [key, n] : s.counters.preemptions) {
    if (viewer.Sees(key.first)) {
      out.Sample("gpupool_preemptions_total", {{"team", key.first}, {"cause", key.second}}, static_cast<double>(n));
    }
  }
  out.Family("gpupool_work_lost_gpu_seconds_total", "counter",
             "GPU-seconds of work since the last checkpoint of leases revoked or lost");
  for (const auto& [team, v] : s.counters.work_lost_gpu_seconds) {
    if (viewer.Sees(team)) out.Sample("gpupool_work_lost_gpu_seconds_total", {{"team", team}}, v);
  }
  out.Family("gpupool_gpu_seconds_total", "counter", "slice-weighted GPU-seconds leased (pool time)");
  for (const auto& [key, v] : CapProjects(s.counters.gpu_seconds)) {
    const auto& [team, project, workload, model] = key;
    if (viewer.Sees(team)) {
      out.Sample("gpupool_gpu_seconds_total",
                 {{"team", team}, {"project", project}, {"workload_class", workload}, {"model", model}}, v);
    }
  }
}

}  // namespace

std::string RenderHeadMetrics(const PoolSnapshot& snapshot, const Viewer& viewer) {
  PrometheusText out;
  PoolWide(snapshot, out);
  PerTeam(snapshot, viewer, out);
  return out.Take();
}

}  // namespace gpupool::runtime
