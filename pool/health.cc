#include "absl/strings/string_view.h"
#include "pool/health.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::pool {

absl::string_view HealthStateName(HealthState state) {
  switch (state) {
    case HealthState::kHealthy: return "healthy";
    case HealthState::kDegraded: return "degraded";
    case HealthState::kDraining: return "draining";
    case HealthState::kQuarantined: return "quarantined";
    case HealthState::kFailed: return "failed";
    case HealthState::kLost: return "lost";
  }
  return "unknown";
}

bool ParseHealthStateName(absl::string_view name, HealthState* state) {
  for (HealthState s : {HealthState::kHealthy, HealthState::kDegraded, HealthState::kDraining,
                        HealthState::kQuarantined, HealthState::kFailed, HealthState::kLost}) {
    if (HealthStateName(s) == name) {
      *state = s;
      return true;
    }
  }
  return false;
}

std::string ThrottleReasonNames(uint64_t mask) {
  static constexpr struct { uint64_t bit; const char* name; } kNames[] = {
      {kThrottleGpuIdle, "gpu_idle"},         {kThrottleApplicationClocks, "app_clocks"},
      {kThrottleSwPowerCap, "sw_power_cap"},  {kThrottleHwSlowdown, "hw_slowdown"},
      {kThrottleSyncBoost, "sync_boost"},     {kThrottleSwThermal, "sw_thermal"},
      {kThrottleHwThermal, "hw_thermal"},     {kThrottleHwPowerBrake, "hw_power_brake"},
  };
  std::vector<std::string> names;
  for (const auto& n : kNames) {
    if (mask & n.bit) names.push_back(n.name);
  }
  return absl::StrJoin(names, ",");
}

XidSeverity ClassifyXid(int xid) {
  switch (xid) {
    case 13: case 31: case 43: case 45: case 68: case 109:
      return XidSeverity::kApplication;
    case 48: case 63: case 64: case 92: case 94: case 95:
      return XidSeverity::kDrain;
    case 79:
      return XidSeverity::kLost;
    default:
      return XidSeverity::kInformational;
  }
}

HealthVerdict AssessHealth(const GpuHealthReading& r, HealthState previous) {
  HealthVerdict v;
  auto raise = [&](HealthState s, std::string reason) {
    v.state = std::max(v.state, s);
    v.reasons.push_back(std::move(reason));
  };
  if (previous == HealthState::kDraining || previous == HealthState::kLost) {
    raise(previous, absl::StrCat("was ", HealthStateName(previous), " (needs repair)"));
  }
  if (!r.reachable) raise(HealthState::kLost, "GPU unreachable");
  for (int xid : r.xids) {
    switch (ClassifyXid(xid)) {
      case XidSeverity::kLost: raise(HealthState::kLost, absl::StrCat("XID ", xid, " (fell off the bus)")); break;
      case XidSeverity::kDrain: raise(HealthState::kDraining, absl::StrCat("XID ", xid)); break;
      case XidSeverity::kInformational: raise(HealthState::kDegraded, absl::StrCat("XID ", xid)); break;
      case XidSeverity::kApplication: break;  // the application's fault, not the GPU's
    }
  }
  if (r.ecc_uncorrectable > 0) {
    raise(HealthState::kDraining, absl::StrCat(r.ecc_uncorrectable, " uncorrectable ECC errors"));
  }
  if (r.ecc_correctable > 0) {
    raise(HealthState::kDegraded, absl::StrCat(r.ecc_correctable, " correctable ECC errors"));
  }
  if (r.remap_pending) raise(HealthState::kDraining, "row remap pending (needs a GPU reset)");
  if (r.remap_failed) raise(HealthState::kDraining, "row remapping failed");
  if (r.retirement_pending) raise(HealthState::kDraining, "page retirement pending (needs a GPU reset)");
  if (r.data_corruption_detected) raise(HealthState::kDraining, "silent data corruption detected");
  if (r.recovery_action > 0) {
    static constexpr const char* kActions[] = {"none", "a GPU reset", "a node reboot", "draining peer-to-peer traffic",
                                               "a drain and reset"};
    raise(HealthState::kDraining,
          absl::StrCat("the driver asks for ",
                       r.recovery_action < 5 ? kActions[r.recovery_action] : absl::StrCat("recovery action ", r.recovery_action)));
  }
  constexpr uint64_t kHarmfulThrottle =
      kThrottleHwSlowdown | kThrottleSwThermal | kThrottleHwThermal | kThrottleHwPowerBrake;
  if (r.throttle_reasons & kHarmfulThrottle) {
    raise(HealthState::kDegraded,
          absl::StrCat("throttled: ", ThrottleReasonNames(r.throttle_reasons & kHarmfulThrottle)));
  }
  return v;
}

}  // namespace gpupool::pool
