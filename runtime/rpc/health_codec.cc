#include "runtime/rpc/health_codec.h"

namespace gpupool::rpc {

Health HealthToWire(pool::HealthState state) {
  switch (state) {
    case pool::HealthState::kHealthy: return Health::HEALTHY;
    case pool::HealthState::kDegraded: return Health::DEGRADED;
    case pool::HealthState::kDraining: return Health::DRAINING;
    case pool::HealthState::kQuarantined: return Health::QUARANTINED;
    case pool::HealthState::kFailed: return Health::FAILED;
    case pool::HealthState::kLost: return Health::LOST;
  }
  return Health::LOST;
}

std::optional<pool::HealthState> HealthFromWire(uint16_t wire) {
  switch (static_cast<Health>(wire)) {
    case Health::HEALTHY: return pool::HealthState::kHealthy;
    case Health::DEGRADED: return pool::HealthState::kDegraded;
    case Health::DRAINING: return pool::HealthState::kDraining;
    case Health::QUARANTINED: return pool::HealthState::kQuarantined;
    case Health::FAILED: return pool::HealthState::kFailed;
    case Health::LOST: return pool::HealthState::kLost;
  }
  return std::nullopt;
}

}  // namespace gpupool::rpc
