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
//   for (int gpu : plan.Due(views, now)) { absl::Status st = diag.Run(gpu, stop); plan.Ran(gpu, st.ok(), now); }
//
// Each test holds a lease of its own from the head (runtime/service/diagnostic_holds.h: team
// `_pool`, outside quotas, charged as workload class `diagnostics`), which any work placed on the
// GPU ends at once: the head then says so (AgentControl.stopDiagnostic), the test stops at its
// next stopping point and its outcome is dropped. A real GPU's test stops between its two parts
// (the matrix product, then the memory pattern test), not inside the memory test: for up to a few
// seconds the new work shares the GPU with it.
#ifndef GPUPOOL_RUNTIME_AGENT_DIAGNOSTICS_H_
#define GPUPOOL_RUNTIME_AGENT_DIAGNOSTICS_H_

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pool/devices/simulated_driver.h"
#include "pool/health.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

// One diagnostic over one GPU of this node (by its index on the node).
class GpuDiagnostic {
 public:
  virtual ~GpuDiagnostic() = default;
  // OK: passed. Unavailable: could not run (nothing is concluded, nothing reported). Cancelled:
  // `stop` was set (the head interrupted the test) and it stopped. Any other error: the GPU
  // failed, and the message says how.
  virtual absl::Status Run(int gpu_index, const std::atomic<bool>& stop) = 0;
};

// A simulated GPU's memory pattern test (SimulatedDriver::RunMemoryTest): fails while injected
// silent corruption is there. It takes `seconds` (real ones, 0 by default), stoppable throughout,
// so that an interruption can be rehearsed. `driver` outlives it.
class SimulatedDiagnostic final : public GpuDiagnostic {
 public:
  SimulatedDiagnostic(pool::SimulatedDriver& driver, std::string driver_node, double seconds = 0)
      : driver_(driver), node_(std::move(driver_node)), seconds_(seconds) {}
  absl::Status Run(int gpu_index, const std::atomic<bool>& stop) override;

 private:
  pool::SimulatedDriver& driver_;
  const std::string node_;
  const double seconds_;
};

// The test the agent runs now and its lease, between the diagnostics thread (which starts and
// ends it) and the connection's loop thread (where the head's stopDiagnostic arrives).
// Thread-safe.
class RunningDiagnostic {
 public:
  // A test under `lease_id` starts; stopped at once if the head ended that lease already (its
  // word can arrive between the lease's grant and this call).
  void Started(const std::string& lease_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The head ended `lease_id`: stops the test if it is the one running, or remembers it for a
  // test about to start under it. `why` is kept for the log.
  void Interrupt(const std::string& lease_id, const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // The agent is stopping: stops whatever test runs.
  void InterruptAny(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // The test ended; returns why it was interrupted ("" when it was not).
  std::string Ended() ABSL_LOCKS_EXCLUDED(mu_);
  const std::atomic<bool>& stop() const { return stop_; }

 private:
  Mutex mu_;
  std::string lease_id_ ABSL_GUARDED_BY(mu_);
  std::string why_ ABSL_GUARDED_BY(mu_);
  // Leases the head ended before their test started (the last few: a lease ends once).
  std::deque<std::pair<std::string, std::string>> ended_early_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
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
  // A test that did not run to its end (work took the GPU first): tried again after the same
  // wait as after a run, without counting as a failure.
  void Skipped(int index, double now_s);

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
