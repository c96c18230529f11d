#include "runtime/agent/diagnostics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace gpupool::runtime {

absl::Status SimulatedDiagnostic::Run(int gpu_index, const std::atomic<bool>& stop) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds_);
  while (std::chrono::steady_clock::now() < until) {
    if (stop.load()) return absl::CancelledError("interrupted");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (stop.load()) return absl::CancelledError("interrupted");
  // Off the bus it is Unavailable (nothing to test: the readings already say it is lost).
  return driver_.RunMemoryTest(pool::GpuRef{node_, gpu_index});
}

void RunningDiagnostic::Started(const std::string& lease_id) {
  MutexLock lock(&mu_);
  lease_id_ = lease_id;
  why_.clear();
  stop_.store(false);
  for (const auto& [ended, why] : ended_early_) {
    if (!lease_id.empty() && ended == lease_id) {
      why_ = why;
      stop_.store(true);
    }
  }
}

void RunningDiagnostic::Interrupt(const std::string& lease_id, const std::string& why) {
  MutexLock lock(&mu_);
  if (lease_id.empty()) return;
  const std::string reason = why.empty() ? "interrupted by the head" : why;
  if (lease_id != lease_id_) {  // over already, or not started yet
    ended_early_.emplace_back(lease_id, reason);
    if (ended_early_.size() > 8) ended_early_.pop_front();
    return;
  }
  why_ = reason;
  stop_.store(true);
}

void RunningDiagnostic::InterruptAny(const std::string& why) {
  MutexLock lock(&mu_);
  why_ = why;
  stop_.store(true);
}

std::string RunningDiagnostic::Ended() {
  MutexLock lock(&mu_);
  lease_id_.clear();
  return why_;
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

void DiagnosticPlan::Skipped(int index, double now_s) { gpus_[index].last_run_s = now_s; }

}  // namespace gpupool::runtime
