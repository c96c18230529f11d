// File: runtime/service/metrics/pool_snapshot.h
//
// The pool as one scrape sees it (PoolService::Snapshot): copied under the pool's lock in one go,
// so what /metrics shows is consistent, and rendered afterwards on the scraper's thread without
// any lock. Pending requests are already counted by (team, class, reason): a queue of 100,000
// requests is a few hundred rows here.
#ifndef GPUPOOL_RUNTIME_SERVICE_METRICS_POOL_SNAPSHOT_H_
#define GPUPOOL_RUNTIME_SERVICE_METRICS_POOL_SNAPSHOT_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pool/health.h"
#include "runtime/service/metrics/pool_metrics.h"

namespace gpupool::runtime {

struct PoolSnapshot {
  struct LeaseOnGpu {
    std::string lease;
    std::string team;
    std::string job;  // the lease's request id, which names its job (the head keeps no other job id per lease)
    double share = 0;  // of this GPU, 0..1
  };
  struct Gpu {
    std::string node;
    int index = 0;
    std::string model;
    pool::HealthState health = pool::HealthState::kHealthy;
    double allocated = 0;  // share of the GPU leased, 0..1
    std::vector<LeaseOnGpu> leases;
  };
  struct TeamGroup {
    double allocated_gpus = 0;  // slice-weighted
    double nominal_gpus = 0;
    double borrowed_gpus = 0;
  };

  double pool_time_s = 0;
  std::map<std::string, bool> node_up;
  std::vector<Gpu> gpus;
  std::map<std::pair<std::string, std::string>, TeamGroup> teams;  // (team, model group)
  // (team, priority class, wait reason) -> requests
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> pending;
  PoolMetrics::Counters counters;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_METRICS_POOL_SNAPSHOT_H_
