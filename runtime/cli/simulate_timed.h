// File: runtime/cli/simulate_timed.h
//
// `gpupool simulate --timed`: the openb trace replayed in time with departures
// (pool/sim/timed_replay.h): utilisation over time, queueing delay, job completion time and
// preemptions, as a table (with a weekly sparkline) or JSON (hourly samples).
#ifndef GPUPOOL_RUNTIME_CLI_SIMULATE_TIMED_H_
#define GPUPOOL_RUNTIME_CLI_SIMULATE_TIMED_H_

#include <string>

namespace gpupool::cli {

struct TimedSimulationFlags {
  std::string nodes;
  std::string pods;
  std::string policy = "default";
  bool json = false;
  double compress = 1.0;
};

void RunTimedSimulation(const TimedSimulationFlags& flags);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_SIMULATE_TIMED_H_
