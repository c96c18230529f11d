#include "runtime/service/metrics/pool_metrics.h"

#include <algorithm>

namespace gpupool::runtime {
namespace {

// Admission waits from a millisecond to about a day; cycles from 10 µs to about 10 s.
std::vector<double> WaitBounds() { return Histogram::Exponential(0.001, 4, 13); }

}  // namespace

PoolMetrics::PoolMetrics() { counters_.cycle_seconds = Histogram(Histogram::Exponential(1e-5, 2, 21)); }

std::string PoolMetrics::Capped(std::map<std::string, std::set<std::string>>& seen, const std::string& team,
                                const std::string& value, size_t cap) {
  std::set<std::string>& kept = seen[team];
  if (kept.contains(value)) return value;
  if (kept.size() >= cap) return "other";
  kept.insert(value);
  return value;
}

void PoolMetrics::Submitted(const std::string& request_id, double submitted_pool_s) {
  if (submitted_.size() < kMaxPendingTracked) submitted_[request_id] = submitted_pool_s;
}

void PoolMetrics::Withdrawn(const std::string& request_id) { submitted_.erase(request_id); }

void PoolMetrics::Granted(const pool::Lease& lease, const std::string& model, double now_pool_s) {
  const pool::LeaseRequest& r = lease.request;
  if (auto it = submitted_.find(r.id); it != submitted_.end()) {
    auto [h, fresh] = counters_.admission_wait.try_emplace({r.team, r.priority_class}, WaitBounds());
    h->second.Observe(std::max(0.0, now_pool_s - it->second));
    submitted_.erase(it);
  }
  Open open{.key = {r.team, Capped(projects_, r.team, r.project, kMaxProjectsPerTeam),
                    Capped(workloads_, r.team, r.workload_class, kMaxWorkloadsPerTeam), model},
            .gpus = static_cast<double>(lease.milli) / 1000.0,
            .counted_from_s = now_pool_s,
            .last_checkpoint_s = now_pool_s};
  open_[lease.id] = std::move(open);
}

void PoolMetrics::Checkpointed(const std::string& lease_id, double now_pool_s) {
  if (auto it = open_.find(lease_id); it != open_.end()) it->second.last_checkpoint_s = now_pool_s;
}

void PoolMetrics::Revoked(const std::string& lease_id, pool::RevokeCause cause) {
  auto it = open_.find(lease_id);
  if (it == open_.end()) return;
  it->second.revoked = true;
  ++counters_.preemptions[{std::get<0>(it->second.key), std::string(pool::RevokeCauseName(cause))}];
}

void PoolMetrics::Closed(const std::string& lease_id, double now_pool_s, bool lost) {
  auto it = open_.find(lease_id);
  if (it == open_.end()) return;
  const Open& o = it->second;
  counters_.gpu_seconds[o.key] += std::max(0.0, now_pool_s - o.counted_from_s) * o.gpus;
  if (lost || o.revoked) {
    counters_.work_lost_gpu_seconds[std::get<0>(o.key)] += std::max(0.0, now_pool_s - o.last_checkpoint_s) * o.gpus;
  }
  open_.erase(it);
}

PoolMetrics::Counters PoolMetrics::Take(double now_pool_s) const {
  Counters out = counters_;
  for (const auto& [id, o] : open_) out.gpu_seconds[o.key] += std::max(0.0, now_pool_s - o.counted_from_s) * o.gpus;
  for (const auto& [team, seen] : projects_) out.work_lost_gpu_seconds.try_emplace(team, 0.0);
  return out;
}

}  // namespace gpupool::runtime
