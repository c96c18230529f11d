// File: pool/sim/team_workload.h
//
// A synthetic multi-team workload with the shape that makes dedicated GPUs sit idle: teams
// alternate sprint weeks (training gangs, bursts of experiments, notebooks) with quiet weeks
// (a few notebooks), while each team's inference service runs all the time. Deterministic for a
// seed, so the dedicated and pooled runs see exactly the same jobs.
//
//   TeamWorkloadOptions o;            // defaults: 8 weeks, 30% sprint weeks, bursts 3x quota
//   std::vector<SimJob> jobs = GenerateTeamWorkload(config.scheduling, "H100-80GB", o);
//
// The defaults follow the problem statement in ../shared/DESIGN.md §1 (bursty training, teams
// sized for their peak); they are parameters, not a fit to any target.
#ifndef GPUPOOL_POOL_SIM_TEAM_WORKLOAD_H_
#define GPUPOOL_POOL_SIM_TEAM_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pool/config/scheduling_config.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool::sim {

// The pool `gpupool simulate --workload teams` uses without --config: 8 nodes x 8 H100 shared by
// four teams with 16 GPUs of nominal quota each.
inline constexpr char kDefaultTeamsPoolYaml[] = R"(nodes:
  - {name: n, count: 8, gpus: [{model: H100-80GB, count: 8}]}
teams:
  - {name: vision, quotas: [{gpus: H100-80GB, nominal: 16}]}
  - {name: speech, quotas: [{gpus: H100-80GB, nominal: 16}]}
  - {name: search, quotas: [{gpus: H100-80GB, nominal: 16}]}
  - {name: ads, quotas: [{gpus: H100-80GB, nominal: 16}]}
)";

struct TeamWorkloadOptions {
  int weeks = 8;
  uint64_t seed = 42;
  double sprint_probability = 0.3;  // chance a team's week is a sprint
  double burst_factor = 3.0;        // sprint demand relative to the team's nominal quota
  bool impatient = true;            // jobs give up after their patience (see SimJob)
};

// One job: a lease request plus how much work it carries.
struct SimJob {
  LeaseRequest request;            // id, team, class, shape; runtime_estimate_s set for backfill
  int64_t arrival_s = 0;
  int64_t work_s = 0;              // wall-clock time it needs while it holds its slots
  bool checkpointable = true;      // false: a preempted job restarts from scratch
  bool sprint = false;             // submitted during its team's sprint week
  // How long its owner waits for it to start before giving up (a notebook user goes home, a
  // sweep's leftover trials are cancelled when the sprint ends); 0 waits forever.
  int64_t patience_s = 0;
};

// `group` is the model group every job runs on (the teams' quota group).
std::vector<SimJob> GenerateTeamWorkload(const SchedulingConfig& config, const std::string& group,
                                         const TeamWorkloadOptions& options);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_TEAM_WORKLOAD_H_
