// File: runtime/service/metrics/head_metrics.h
//
// The head's /metrics page: a PoolSnapshot in the Prometheus text format under Kueue-style
// `gpupool_*` names (the README's "Metrics" section lists them). What a viewer sees follows
// head_auth.h: the operators every row; a team the pool-wide families (nodes, GPU health and
// allocation, the scheduler's cycle time) and its own team's rows of the per-team families.
// `project` is capped per team: its kTopProjects projects by GPU-seconds, the rest summed as
// "other".
//
//   std::string text = RenderHeadMetrics(pool.Snapshot(), viewer);
//
// A pure function: any thread, no lock.
#ifndef GPUPOOL_RUNTIME_SERVICE_METRICS_HEAD_METRICS_H_
#define GPUPOOL_RUNTIME_SERVICE_METRICS_HEAD_METRICS_H_

#include <string>

#include "runtime/service/head_auth.h"
#include "runtime/service/metrics/pool_snapshot.h"

namespace gpupool::runtime {

inline constexpr size_t kTopProjects = 10;

std::string RenderHeadMetrics(const PoolSnapshot& snapshot, const Viewer& viewer);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_METRICS_HEAD_METRICS_H_
