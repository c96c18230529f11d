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
// What each team of nominal quota Q GPUs submits (all on the given model group):
//   inference   Q/16 GPUs as half-GPU fractions, non-preemptible, for the whole horizon.
//   quiet week  one notebook a working day (a quarter GPU, 2-6 h, from 9-12 h, patience 1 h).
//               A quarter GPU is a quarter of the compute and of the model's memory.
//   sprint week (probability `sprint_probability`, drawn per team and week, independently)
//               `burst_factor` x Q x 168 GPU-hours of work:
//     60% training: gangs of min(8, Q/2) whole GPUs on one node, 1 h + Exp(mean 12 h), arriving
//         over the first five days, checkpointable, waiting until the end of the following week;
//     35% experiments: 1-2 whole GPUs on one node, 1-6 h, arriving over six days,
//         checkpointable, cancelled if not started by the sprint's end;
//      5% notebooks: a quarter GPU, 2-8 h, 9-12 h on working days, not checkpointable, patience
//         1 h.
//   urgent      (only with urgent_per_team_day > 0) see TeamWorkloadOptions.
// Every figure is a parameter of the problem in ../shared/DESIGN.md §1 (bursty training, teams
// idle between pushes), not a fit to any target. How the pooled/dedicated comparison depends on
// them (teams, burst factor, sprint probability, patience): bench/teams/README.md.
#ifndef GPUPOOL_POOL_SIM_TEAM_WORKLOAD_H_
#define GPUPOOL_POOL_SIM_TEAM_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pool/config/scheduling_config.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool::sim {

// The pool `gpupool simulate --workload teams` uses without --config is TeamsPoolYaml(4): 8 nodes
// x 8 H100 shared by vision, speech, search and ads with 16 GPUs of nominal quota each. More teams
// (team5, team6, ...) bring two nodes each, so every team's share of the pool stays the same and
// only the number of teams whose bursts can interleave changes.
inline constexpr int kDefaultTeams = 4;
std::string TeamsPoolYaml(int teams);

struct TeamWorkloadOptions {
  int weeks = 8;
  uint64_t seed = 42;
  double sprint_probability = 0.3;  // chance a team's week is a sprint
  double burst_factor = 3.0;        // sprint demand relative to the team's nominal quota
  bool impatient = true;            // jobs give up after their patience (see SimJob)
  // Urgent work (the spare reserve's bench, bench/teams/README.md): each team submits one-GPU
  // requests of class `urgent_class` at this mean rate per day (Poisson, day and night, over the
  // whole horizon), each 10-60 min of work that cannot checkpoint (an incident's evaluation, a
  // hotfix's retraining). Drawn from a stream of its own: the other jobs stay the same. 0: none.
  double urgent_per_team_day = 0;
  std::string urgent_class = "urgent";
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
