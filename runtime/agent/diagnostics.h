// File: runtime/agent/diagnostics.h
//
// Active diagnostics on a node's GPUs (DESIGN §4b): the faults no counter shows (silent data
// corruption) are found only by running a known-answer test. The agent runs one on each GPU that
// has been idle for `every` and on each quarantined GPU (retrying with a backoff that doubles
// after each failure), and reports the outcome to the head, whose state machine decides
// (pool/health_machine.h).
//
//   SimulatedDiagnostic diag(*sim_driver, "node-0");     // or CudaDiagnostic (cuda_diagnostic.h)
//   DiagnosticPlan plan({.every_s = 300, .quarantine_retry_s = 30});
//   for (int gpu : plan.Due(views, now)) { absl::Status st = diag.Run(gpu); plan.Ran(gpu, st.ok(), now); }
//
// What is missing: a diagnostic does not yet hold a lease of its own (an internal job of a
// reserved team `_pool`); it runs only on GPUs the head reports without a lease, so a lease
// granted while it runs shares the GPU with it for its few seconds.
#ifndef GPUPOOL_RUNTIME_AGENT_DIAGNOSTICS_H_
#define GPUPOOL_RUNTIME_AGENT_DIAGNOSTICS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pool/devices/simulated_driver.h"
#include "pool/health.h"

namespace gpupool::runtime {

// One diagnostic over one GPU of this node (by its index on the node).
class GpuDiagnostic {
 public:
  virtual ~GpuDiagnostic() = default;
  // OK: passed. Unavailable: could not run (nothing is concluded, nothing reported). Any other
  // error: the GPU failed, and the message says how.
  virtual absl::Status Run(int gpu_index) = 0;
};

// A simulated GPU's memory pattern test (SimulatedDriver::RunMemoryTest): fails while injected
// silent corruption is there. `driver` outlives it.
class SimulatedDiagnostic final : public GpuDiagnostic {
 public:
  SimulatedDiagnostic(pool::SimulatedDriver& driver, std::string driver_node)
      : driver_(driver), node_(std::move(driver_node)) {}
  absl::Status Run(int gpu_index) override;

 private:
  pool::SimulatedDriver& driver_;
  const std::string node_;
};

struct DiagnosticPolicy {
  double every_s = 300;            // an idle GPU is tested after this long idle and untested
  double quarantine_retry_s = 30;  // a quarantined GPU: first retry; doubles after each failure
  double max_backoff_s = 600;      // the longest wait between a quarantined GPU's tests
};

// Which GPUs are due a diagnostic. Pure bookkeeping over what the head says of each GPU; not
// thread-safe (the agent's diagnostics thread owns it).
class DiagnosticPlan {
 public:
  struct GpuView {
    int index = 0;
    pool::HealthState state = pool::HealthState::kHealthy;  // as the head applies it
    bool leased = false;
  };
  explicit DiagnosticPlan(DiagnosticPolicy policy) : policy_(policy) {}

  // The GPUs to test now, in index order: quarantined ones without a lease whose retry is due,
  // and healthy or degraded ones that have been idle and untested for `every_s`.
  std::vector<int> Due(const std::vector<GpuView>& gpus, double now_s);
  void Ran(int index, bool passed, double now_s);

 private:
  struct Gpu {
    std::optional<double> idle_since_s;
    std::optional<double> last_run_s;
    int failures_in_a_row = 0;
  };
  double RetryAfter(const Gpu& g) const;

  DiagnosticPolicy policy_;
  std::map<int, Gpu> gpus_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_DIAGNOSTICS_H_
