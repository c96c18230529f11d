// File: examples/common/reclaim.h
//
// The scenario the training examples are preempted by: team `research` has no GPUs of its own
// and borrows idle ones; team `prod` owns one H100 (its guaranteed quota) and, midway, runs a
// production-inference service on it. The pool then reclaims the GPU from research with the
// priority class's grace period. Each example registers Serve with GPUPOOL_REMOTE(reclaim::Serve).
#ifndef GPUPOOL_EXAMPLES_COMMON_RECLAIM_H_
#define GPUPOOL_EXAMPLES_COMMON_RECLAIM_H_

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"

namespace reclaim {

inline constexpr char kTeams[] = R"(
teams:
  - name: prod
    quotas: [{gpus: H100-80GB, nominal: 1}]
  - name: research
    quotas: [{gpus: H100-80GB, nominal: 0, borrowing_limit: 8}]
)";

// The examples' runtime options: gpupool's flags from the command line, else one simulated H100
// (per process; per rank under mpirun), the two teams above, a pool clock 600x real time (1 real
// second = 10 pool minutes), and the pool's events of `kinds` printed as they happen.
inline gpupool::RuntimeOptions Options(int& argc, char** argv, std::vector<std::string> kinds) {
  gpupool::RuntimeOptions options = gpupool::OptionsFromFlags(argc, argv);
  if (options.simulate.empty() && options.config_path.empty()) options.simulate = "1xH100-80GB";
  if (options.config_path.empty() && options.config_text.empty()) options.config_text = kTeams;
  if (options.clock_speed == 1.0) options.clock_speed = 600;
  options.lease_linger_ms = 50;
  options.on_event = [kinds = std::move(kinds)](const gpupool::RuntimeEvent& e) {
    if (std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end()) return;
    std::printf("[pool %6.0f s] %-8s %-14s %s\n", e.pool_time_s, e.team.c_str(), e.kind.c_str(), e.detail.c_str());
    std::fflush(stdout);
  };
  return options;
}

// prod's service: holds its GPU for `pool_seconds` of pool time.
inline int Serve(gpupool::TaskContext& ctx, double pool_seconds) {
  ctx.SleepPoolTime(pool_seconds);
  return 1;
}

}  // namespace reclaim

#endif  // GPUPOOL_EXAMPLES_COMMON_RECLAIM_H_
