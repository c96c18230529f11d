// File: pool/health.h
//
// What a GPU's health counters mean for scheduling. A driver reads raw figures (ECC counters,
// retired pages or remapped rows, XID events, throttle reasons, temperature) into a
// GpuHealthReading; AssessHealth turns them into a HealthState with the reasons, using NVIDIA's
// published guidance:
//   - XIDs 13, 31, 43, 45, 68, 109 are application errors: the GPU is fine (the same list the
//     Kubernetes device plugin skips).
//   - XID 48 (double-bit ECC), 63/64 (page retirement / row remapping), 94/95 (contained /
//     uncontained ECC) and 92 (high single-bit rate) call for draining; 79 means the GPU fell off
//     the bus and is lost until the node is repaired.
//   - A pending row remap or page retirement needs a GPU reset: drain.
//   - Uncorrectable volatile ECC errors: drain. Correctable ones alone only degrade.
//   - The driver's recovery action (reset, reboot, drain) drains.
//   - Thermal or power-brake throttling degrades (placement may prefer other GPUs).
// Thread-safety: pure functions.
#ifndef GPUPOOL_POOL_HEALTH_H_
#define GPUPOOL_POOL_HEALTH_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

namespace gpupool::pool {

// Ordered from best to worst; a verdict is the worst state any reason calls for.
enum class HealthState {
  kHealthy,   // schedulable
  kDegraded,  // schedulable, placement prefers other GPUs
  kDraining,  // no new leases; running leases are revoked with their grace period
  // The next two come from the health state machine (pool/health_machine.h), never from a
  // reading: AssessHealth does not return them.
  kQuarantined,  // drained and empty: no leases; diagnosed until it passes (healthy) or fails
  kFailed,       // failed its diagnostics too often: out of service until an operator repairs it
  kLost,         // gone (fell off the bus, driver cannot reach it): leases are lost
};
absl::string_view HealthStateName(HealthState state);  // "healthy", "degraded", ...
// The inverse of HealthStateName; false for any other text.
bool ParseHealthStateName(absl::string_view name, HealthState* state);
// Whether the scheduler may place new leases on a GPU in `state` (healthy or degraded).
inline bool Schedulable(HealthState state) {
  return state == HealthState::kHealthy || state == HealthState::kDegraded;
}

// Throttle reasons as NVML reports them (nvmlClocksEventReasons bit values).
enum ThrottleReason : uint64_t {
  kThrottleGpuIdle = 0x1,
  kThrottleApplicationClocks = 0x2,
  kThrottleSwPowerCap = 0x4,
  kThrottleHwSlowdown = 0x8,
  kThrottleSyncBoost = 0x10,
  kThrottleSwThermal = 0x20,
  kThrottleHwThermal = 0x40,
  kThrottleHwPowerBrake = 0x80,
};
// "sw_power_cap,hw_thermal" (empty when none).
std::string ThrottleReasonNames(uint64_t mask);

struct GpuHealthReading {
  bool reachable = true;                 // false: the driver cannot talk to the GPU at all
  // Volatile (since the last driver load) ECC error counts; -1 when ECC is off or unsupported.
  int64_t ecc_correctable = -1;
  int64_t ecc_uncorrectable = -1;
  // Page retirement (pre-Ampere) or row remapping (Ampere and later); -1 when unsupported.
  int64_t retired_pages = -1;
  bool retirement_pending = false;
  int64_t remapped_rows_correctable = -1;
  int64_t remapped_rows_uncorrectable = -1;
  bool remap_pending = false;
  bool remap_failed = false;
  std::vector<int> xids;                 // XID events since the previous reading
  uint64_t throttle_reasons = 0;         // ThrottleReason bits
  int temperature_c = -1;                // -1 when unknown
  // The driver's own verdict (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R550 and later):
  // 0 none, 1 GPU reset, 2 node reboot, 3 drain peer-to-peer, 4 drain and reset; -1 when the driver
  // does not have it. Anything but none drains.
  int recovery_action = -1;
  // Faults only an active test finds (a memory pattern test, DCGM diagnostics); the simulated
  // driver sets it for injected silent corruption.
  bool data_corruption_detected = false;
};

enum class XidSeverity { kApplication, kInformational, kDrain, kLost };
XidSeverity ClassifyXid(int xid);

struct HealthVerdict {
  HealthState state = HealthState::kHealthy;
  std::vector<std::string> reasons;  // empty when healthy
};

// `previous` lets a state that needs repair persist: a drained or lost GPU does not become
// healthy again because a later reading looks clean (only an operator or a reset clears it).
HealthVerdict AssessHealth(const GpuHealthReading& reading,
                           HealthState previous = HealthState::kHealthy);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_HEALTH_H_
