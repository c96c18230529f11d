// File: runtime/cli/simulate_teams.h
//
// `gpupool simulate --workload teams`: the generated multi-team workload (pool/sim/team_workload.h)
// run through the pool scheduler twice, dedicated and pooled, and the two compared.
#ifndef GPUPOOL_RUNTIME_CLI_SIMULATE_TEAMS_H_
#define GPUPOOL_RUNTIME_CLI_SIMULATE_TEAMS_H_

#include <cstdint>
#include <string>

namespace gpupool::cli {

struct TeamsSimulationFlags {
  std::string config;  // YAML with nodes and teams; empty: the built-in 64-GPU, 4-team pool
  int weeks = 8;
  uint64_t seed = 42;
  double sprint_probability = 0.3;  // see pool/sim/team_workload.h
  double burst_factor = 3.0;
  bool json = false;
  std::string html;  // also write a web page with utilisation over time here
};

// Throws CommandFailed on bad input (a config without nodes or teams, a model group to simulate
// that no team has a quota for).
void RunTeamsSimulation(const TeamsSimulationFlags& flags);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_SIMULATE_TEAMS_H_
