#include "gpupool/pool_description.h"

#include <initializer_list>
#include <memory>
#include <optional>
#include <string_view>

#include "pool/devices/driver_selection.h"
#include "pool/config/pool_config.h"
#include "pool/gpu_catalogue.h"
#include "pool/health.h"
#include "pool/inventory.h"
#include "runtime/tasks/status_to_error.h"
#include "runtime/rpc/node_codec.h"

namespace gpupool {
namespace {

GpuInfo ToGpuInfo(const pool::InventoryGpu& gpu, const pool::GpuHealthReading& reading,
                  const pool::HealthVerdict& verdict, const pool::PoolConfig& config) {
  GpuInfo info = rpc::GpuInfoOf(gpu.device);
  info.model = gpu.model != nullptr ? gpu.model->name : gpu.device.name;  // the device's name when uncatalogued
  info.nvlink_island = gpu.nvlink_island;  // pool-wide: "node-0/nvl0"
  info.health = rpc::FromPool(verdict.state);
  info.health_reasons = verdict.reasons;
  info.temperature_c = reading.temperature_c;
  info.price_per_hour = gpu.model != nullptr ? config.PricePerHour(*gpu.model) : 0;
  info.labels = gpu.labels;
  return info;
}

template <typename Enum>
std::optional<Enum> Parse(std::string_view name, std::string_view (*namer)(Enum),
                          std::initializer_list<Enum> all) {
  for (Enum e : all) {
    if (namer(e) == name) return e;
  }
  return std::nullopt;
}

}  // namespace

// absl::string_view is not std::string_view in this build; the names are literals.
std::string_view MigModeName(MigMode mode) {
  absl::string_view name = pool::MigModeName(rpc::ToPool(mode));
  return {name.data(), name.size()};
}

std::string_view HealthStateName(HealthState state) {
  absl::string_view name = pool::HealthStateName(rpc::ToPool(state));
  return {name.data(), name.size()};
}

std::optional<MigMode> ParseMigMode(std::string_view name) {
  return Parse<MigMode>(name, MigModeName,
                        {MigMode::kUnsupported, MigMode::kDisabled, MigMode::kEnabled});
}

std::optional<HealthState> ParseHealthState(std::string_view name) {
  return Parse<HealthState>(name, HealthStateName,
                            {HealthState::kHealthy, HealthState::kDegraded, HealthState::kDraining,
                             HealthState::kQuarantined, HealthState::kFailed, HealthState::kLost});
}

PoolDescription DescribePool(const PoolOptions& options) {
  pool::PoolConfig config;
  if (!options.config_path.empty()) {
    config = runtime::ValueOrThrow(pool::LoadPoolConfig(options.config_path));
  }
  pool::DriverChoice choice{options.driver, options.simulate, options.node_count, &config};
  pool::SelectedDriver selected = runtime::ValueOrThrow(pool::SelectDriver(choice));
  pool::Inventory inventory =
      runtime::ValueOrThrow(pool::Inventory::FromDiscovery(runtime::ValueOrThrow(selected.driver->Discover())));

  PoolDescription description;
  description.driver = std::string(selected.driver->name());
  description.notice = selected.notice;
  for (const pool::InventoryNode& node : inventory.nodes()) {
    NodeInfo info{node.name, node.labels, {}};
    for (size_t position : node.gpu_positions) {
      const pool::InventoryGpu& gpu = inventory.gpus()[position];
      // A GPU whose health cannot be read is reported as lost with the reason, not hidden.
      absl::StatusOr<pool::GpuHealthReading> reading = selected.driver->ReadHealth(gpu.ref);
      pool::HealthVerdict verdict;
      if (reading.ok()) {
        verdict = pool::AssessHealth(*reading, gpu.health);
      } else {
        verdict = {pool::HealthState::kLost,
                   {std::string("health unreadable: ") + std::string(reading.status().message())}};
      }
      info.gpus.push_back(
          ToGpuInfo(gpu, reading.ok() ? *reading : pool::GpuHealthReading{}, verdict, config));
    }
    description.nodes.push_back(std::move(info));
  }
  return description;
}

}  // namespace gpupool
