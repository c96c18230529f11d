// File: runtime/agent/health_check.h
//
// The operators' node health check (`gpupool agent --health-check-program PATH
// --health-check-every SECONDS`), as Slurm's HealthCheckProgram: the agent runs the program every
// so often; a non-zero exit (or a hang past its timeout) drains the node, with what the program
// printed as the reason. Like Slurm's, a drained node stays drained until an operator resumes it
// (`gpupool node resume NODE`): a check that passes again does not vouch for the node by itself.
//
//   absl::StatusOr<HealthCheckOutcome> out = RunHealthCheck("/etc/gpupool/check.sh", 30s);
//   if (out.ok() && !out->passed()) report(out->output);
#ifndef GPUPOOL_RUNTIME_AGENT_HEALTH_CHECK_H_
#define GPUPOOL_RUNTIME_AGENT_HEALTH_CHECK_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace gpupool::runtime {

struct HealthCheckOutcome {
  int exit_code = 0;        // -1 when killed (by its timeout or a signal)
  bool timed_out = false;
  std::string output;       // stdout and stderr together, at most 4 KiB, trailing space trimmed
  bool passed() const { return exit_code == 0 && !timed_out; }
};

// Runs `program` (no arguments, no shell) and waits at most `timeout` (then kills it).
// Unavailable when it cannot be started at all (the message says why): not the node's fault.
absl::StatusOr<HealthCheckOutcome> RunHealthCheck(const std::string& program, std::chrono::milliseconds timeout);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_HEALTH_CHECK_H_
