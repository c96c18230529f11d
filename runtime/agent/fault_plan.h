// File: runtime/agent/fault_plan.h
//
// Rehearsal without hardware (`gpupool agent --simulate ... --inject GPU:KIND@SECONDS`): faults
// injected into this agent's simulated GPUs at set times after it registered, so an operator (and
// the tests) can watch the health loop on a running pool.
//
//   absl::StatusOr<FaultInjection> f = ParseFaultInjection("1:silent-corruption@5");
//   FaultInjector injector(*sim_driver, "node-0", {*f}, [](const FaultInjection&, double t) {...});
//   injector.Start();   // the clock starts here (call it once the agent has registered)
//
// KIND: xid-N (an XID event), ecc-dbe / ecc-sbe (a double- / single-bit ECC error),
// silent-corruption (found only by a diagnostic), off-bus (XID 79), repaired (the GPU is fixed
// and reset: every fault and counter cleared).
#ifndef GPUPOOL_RUNTIME_AGENT_FAULT_PLAN_H_
#define GPUPOOL_RUNTIME_AGENT_FAULT_PLAN_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

enum class FaultKind { kXid, kEccDoubleBit, kEccSingleBit, kSilentCorruption, kOffBus, kRepaired };

struct FaultInjection {
  int gpu = 0;         // the GPU's index on this node
  FaultKind kind = FaultKind::kXid;
  int xid = 0;         // kXid only
  double at_s = 0;     // seconds after Start
  std::string text;    // as given, for messages
};

// "GPU:KIND@SECONDS"; InvalidArgument naming the part that is wrong and what is allowed.
absl::StatusOr<FaultInjection> ParseFaultInjection(absl::string_view spec);
// Applies `f` to GPU f.gpu of `driver_node` now.
absl::Status ApplyFault(pool::SimulatedDriver& driver, const std::string& driver_node, const FaultInjection& f);

// Applies each injection at its time on a thread of its own; stops (dropping what is left) when
// destroyed. `on_applied` runs on that thread after each, with the Unix time it was applied and
// the driver's answer. `driver` outlives it.
class FaultInjector {
 public:
  using Applied = std::function<void(const FaultInjection&, double unix_s, const absl::Status&)>;
  FaultInjector(pool::SimulatedDriver& driver, std::string driver_node, std::vector<FaultInjection> plan,
                Applied on_applied);
  ~FaultInjector();
  void Start();  // once

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  pool::SimulatedDriver& driver_;
  const std::string node_;
  const std::vector<FaultInjection> plan_;  // by time
  const Applied on_applied_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_FAULT_PLAN_H_
