#include "runtime/cli/agent_health_flags.h"

#include <cmath>
#include <iostream>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/agent/cuda_diagnostic.h"
#include "runtime/cli/command.h"

namespace gpupool::cli {
namespace {

std::chrono::milliseconds Millis(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

void CheckSeconds(const char* flag, double s, bool zero_allowed) {
  if (!std::isfinite(s) || s < 0 || (!zero_allowed && s == 0) || s > 86400 * 365) {
    throw CommandFailed(absl::StrCat(flag, " must be ", zero_allowed ? "between 0 and" : "more than 0 and at most",
                                     " a year of seconds, not ", s));
  }
}

}  // namespace

void AddAgentHealthFlags(CLI::App* agent, AgentHealthFlags& flags) {
  agent->add_option("--diagnose-every", flags.diagnose_every_s,
                    "run a diagnostic on each GPU idle this many seconds, and on quarantined ones (0: none; default 300)");
  agent->add_option("--quarantine-retry", flags.quarantine_retry_s,
                    "seconds before a quarantined GPU's next diagnostic, doubled after each failure (default 30)");
  agent->add_option("--simulated-diagnostic-s", flags.simulated_diagnostic_s,
                    "with --simulate: how long a simulated GPU's diagnostic takes, in seconds (default 0; a real "
                    "one takes seconds)");
  agent->add_option("--health-check-program", flags.health_check_program,
                    "the operators' node check: a non-zero exit drains the node with its output as the reason");
  agent->add_option("--health-check-every", flags.health_check_every_s, "seconds between health checks (default 300)");
  agent->add_option("--inject", flags.inject,
                    "with --simulate: GPU:KIND@SECONDS after registration, KIND xid-N, ecc-dbe, ecc-sbe, "
                    "silent-corruption, off-bus or repaired (repeatable)");
}

AgentHealth PrepareAgentHealth(const AgentHealthFlags& flags, pool::DeviceDriver& driver,
                               const std::string& driver_node, const pool::DiscoveredNode& node) {
  CheckSeconds("--diagnose-every", flags.diagnose_every_s, /*zero_allowed=*/true);
  CheckSeconds("--quarantine-retry", flags.quarantine_retry_s, /*zero_allowed=*/false);
  CheckSeconds("--health-check-every", flags.health_check_every_s, /*zero_allowed=*/false);
  CheckSeconds("--simulated-diagnostic-s", flags.simulated_diagnostic_s, /*zero_allowed=*/true);
  auto* simulated = dynamic_cast<pool::SimulatedDriver*>(&driver);
  AgentHealth health;
  std::vector<runtime::FaultInjection> faults;
  for (const std::string& spec : flags.inject) {
    absl::StatusOr<runtime::FaultInjection> f = runtime::ParseFaultInjection(spec);
    if (!f.ok()) throw CommandFailed(std::string(f.status().message()));
    bool known = false;
    for (const pool::DiscoveredGpu& g : node.gpus) known |= g.index == f->gpu;
    if (!known) {
      throw CommandFailed(absl::StrCat("--inject '", spec, "': this node has no GPU ", f->gpu, " (it has ",
                                       node.gpus.size(), ": 0 to ", static_cast<int>(node.gpus.size()) - 1, ")"));
    }
    faults.push_back(*f);
  }
  if (!faults.empty()) {
    if (simulated == nullptr) throw CommandFailed("--inject needs simulated GPUs (--simulate COUNTxMODEL)");
    health.injector = std::make_unique<runtime::FaultInjector>(
        *simulated, driver_node, std::move(faults),
        [](const runtime::FaultInjection& f, double unix_s, const absl::Status& st) {
          std::cout << "gpupool agent: injected " << f.text << " at " << absl::StrFormat("%.3f", unix_s)
                    << (st.ok() ? "" : absl::StrCat(" (refused: ", st.message(), ")")) << std::endl;
        });
  }
  if (flags.simulated_diagnostic_s > 0 && simulated == nullptr) {
    throw CommandFailed("--simulated-diagnostic-s needs simulated GPUs (--simulate COUNTxMODEL)");
  }
  if (flags.diagnose_every_s > 0) {
    if (simulated != nullptr) {
      health.diagnostic =
          std::make_unique<runtime::SimulatedDiagnostic>(*simulated, driver_node, flags.simulated_diagnostic_s);
    } else {
      health.diagnostic = std::make_unique<runtime::CudaDiagnostic>();
    }
  }
  return health;
}

void ApplyAgentHealth(const AgentHealthFlags& flags, const AgentHealth& health, runtime::NodeAgentOptions& options) {
  options.diagnostic = health.diagnostic.get();
  options.diagnostics = runtime::DiagnosticPolicy{
      .every_s = flags.diagnose_every_s, .quarantine_retry_s = flags.quarantine_retry_s,
      .max_backoff_s = std::max(flags.diagnose_every_s, flags.quarantine_retry_s)};
  options.health_check_program = flags.health_check_program;
  options.health_check_every = Millis(flags.health_check_every_s);
  options.log = [](const std::string& line) { std::cout << "gpupool agent: " << line << std::endl; };
}

}  // namespace gpupool::cli
