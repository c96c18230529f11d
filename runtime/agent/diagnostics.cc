#include "runtime/agent/diagnostics.h"

#include <algorithm>
#include <cmath>

namespace gpupool::runtime {

absl::Status SimulatedDiagnostic::Run(int gpu_index) {
  // Off the bus it is Unavailable (nothing to test: the readings already say it is lost).
  return driver_.RunMemoryTest(pool::GpuRef{node_, gpu_index});
}

double DiagnosticPlan::RetryAfter(const Gpu& g) const {
  const double backoff = policy_.quarantine_retry_s * std::pow(2.0, std::min(g.failures_in_a_row, 20));
  return std::min(backoff, std::max(policy_.max_backoff_s, policy_.quarantine_retry_s));
}

std::vector<int> DiagnosticPlan::Due(const std::vector<GpuView>& gpus, double now_s) {
  std::vector<int> due;
  for (const GpuView& v : gpus) {
    Gpu& g = gpus_[v.index];
    if (v.leased) {
      g.idle_since_s.reset();
      continue;
    }
    if (!g.idle_since_s.has_value()) g.idle_since_s = now_s;
    if (v.state == pool::HealthState::kQuarantined) {
      if (!g.last_run_s.has_value() || now_s - *g.last_run_s >= RetryAfter(g)) due.push_back(v.index);
    } else if (pool::Schedulable(v.state) && policy_.every_s > 0) {
      const double quiet_since = std::max(*g.idle_since_s, g.last_run_s.value_or(*g.idle_since_s));
      if (now_s - quiet_since >= policy_.every_s) due.push_back(v.index);
    }
  }
  return due;
}

void DiagnosticPlan::Ran(int index, bool passed, double now_s) {
  Gpu& g = gpus_[index];
  g.last_run_s = now_s;
  g.failures_in_a_row = passed ? 0 : g.failures_in_a_row + 1;
}

}  // namespace gpupool::runtime
