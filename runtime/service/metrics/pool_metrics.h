// File: runtime/service/metrics/pool_metrics.h
//
// The pool's counters since it started, for /metrics (Kueue-style names, head_metrics.h): how long
// requests waited for their grant, preemptions by cause, GPU-seconds of work lost to them,
// slice-weighted GPU-seconds by team, project, workload class and model, and how long each
// scheduling cycle took. PoolService feeds it under its lock as leases open, checkpoint, are
// revoked and close; Take copies it for a scrape.
//
// Client-chosen label values (project, workload class) are capped per team: the first
// kMaxProjectsPerTeam projects (and kMaxWorkloadsPerTeam workload classes) a team uses are kept by
// name, later ones count as "other", so a client cannot grow the head's memory or the scrape
// without bound. The scrape then shows each team's top projects by GPU-seconds plus "other".
//
// Not thread-safe: its owner's lock guards it.
#ifndef GPUPOOL_RUNTIME_SERVICE_METRICS_POOL_METRICS_H_
#define GPUPOOL_RUNTIME_SERVICE_METRICS_POOL_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "pool/scheduler/scheduler.h"
#include "runtime/http/histogram.h"

namespace gpupool::runtime {

class PoolMetrics {
 public:
  static constexpr size_t kMaxProjectsPerTeam = 20;
  static constexpr size_t kMaxWorkloadsPerTeam = 8;
  static constexpr size_t kMaxPendingTracked = 1'000'000;  // submit times kept for admission waits

  // team, project, workload class, GPU model
  using UsageKey = std::tuple<std::string, std::string, std::string, std::string>;
  struct Counters {
    std::map<std::pair<std::string, std::string>, Histogram> admission_wait;  // (team, class), pool seconds
    std::map<std::pair<std::string, std::string>, uint64_t> preemptions;      // (team, cause)
    std::map<std::string, double> work_lost_gpu_seconds;                      // by team
    std::map<UsageKey, double> gpu_seconds;  // closed leases, plus open ones up to the snapshot
    Histogram cycle_seconds;                 // real seconds per scheduling cycle
  };

  PoolMetrics();

  void Submitted(const std::string& request_id, double submitted_pool_s);
  void Withdrawn(const std::string& request_id);
  // `model`: the catalogue name of the lease's GPUs.
  void Granted(const pool::Lease& lease, const std::string& model, double now_pool_s);
  void Checkpointed(const std::string& lease_id, double now_pool_s);
  void Revoked(const std::string& lease_id, pool::RevokeCause cause);
  // `lost`: the GPU went away or the lease outlived its revocation deadline. Work since the last
  // checkpoint of a lease revoked or lost counts as lost.
  void Closed(const std::string& lease_id, double now_pool_s, bool lost);
  void CycleTook(double seconds) { counters_.cycle_seconds.Observe(seconds); }

  // The counters, open leases counted up to `now_pool_s`.
  Counters Take(double now_pool_s) const;

 private:
  struct Open {
    UsageKey key;
    double gpus = 0;
    double counted_from_s = 0;  // pool seconds
    double last_checkpoint_s = 0;
    bool revoked = false;
  };
  // The label a team's client-chosen value gets: itself while under the cap, else "other".
  std::string Capped(std::map<std::string, std::set<std::string>>& seen, const std::string& team,
                     const std::string& value, size_t cap);

  Counters counters_;
  std::map<std::string, double> submitted_;  // request id -> pool seconds
  std::map<std::string, Open> open_;         // lease id
  std::map<std::string, std::set<std::string>> projects_;   // team -> kept names
  std::map<std::string, std::set<std::string>> workloads_;  // team -> kept names
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_METRICS_POOL_METRICS_H_
