// File: runtime/cli/agent_health_flags.h
//
// The health flags of `gpupool agent` (issue 24), kept apart from the daemon's own flags:
//   --diagnose-every SECONDS        test each idle GPU this often (0: no diagnostics)
//   --quarantine-retry SECONDS      a quarantined GPU's first retest; doubles after each failure
//   --health-check-program PATH     the operators' node check; non-zero exit drains the node
//   --health-check-every SECONDS
//   --inject GPU:KIND@SECONDS       (with --simulate) a fault at a time after registration
// Bad input throws CommandFailed naming the flag and what is allowed.
#ifndef GPUPOOL_RUNTIME_CLI_AGENT_HEALTH_FLAGS_H_
#define GPUPOOL_RUNTIME_CLI_AGENT_HEALTH_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "pool/devices/device_driver.h"
#include "runtime/agent/diagnostics.h"
#include "runtime/agent/fault_plan.h"
#include "runtime/agent/node_agent.h"

namespace CLI {
class App;
}  // namespace CLI

namespace gpupool::cli {

struct AgentHealthFlags {
  double diagnose_every_s = 300;
  double quarantine_retry_s = 30;
  double simulated_diagnostic_s = 0;
  std::string health_check_program;
  double health_check_every_s = 300;
  std::vector<std::string> inject;
};
void AddAgentHealthFlags(CLI::App* agent, AgentHealthFlags& flags);

// What the flags make, for the agent's whole life (it outlives each reconnection's NodeAgent).
struct AgentHealth {
  std::unique_ptr<runtime::GpuDiagnostic> diagnostic;  // null: no diagnostics
  std::unique_ptr<runtime::FaultInjector> injector;    // null: nothing injected; Start once registered
};
// Checks the flags against this node's GPUs (`node`, as `driver` discovered it under
// `driver_node`) and builds what they ask for.
AgentHealth PrepareAgentHealth(const AgentHealthFlags& flags, pool::DeviceDriver& driver,
                               const std::string& driver_node, const pool::DiscoveredNode& node);
// Sets the NodeAgent options the flags and `health` stand for.
void ApplyAgentHealth(const AgentHealthFlags& flags, const AgentHealth& health, runtime::NodeAgentOptions& options);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_AGENT_HEALTH_FLAGS_H_
