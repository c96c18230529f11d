#include "pool/devices/driver_selection.h"

#include "absl/strings/str_cat.h"
#include "pool/devices/nvidia_driver.h"
#include "pool/devices/simulated_driver.h"

namespace gpupool::pool {
namespace {

absl::StatusOr<std::unique_ptr<DeviceDriver>> Simulated(const SimulatedPoolSpec& spec) {
  absl::StatusOr<std::unique_ptr<SimulatedDriver>> sim = SimulatedDriver::Create(spec);
  if (!sim.ok()) return sim.status();
  return std::unique_ptr<DeviceDriver>(std::move(*sim));
}

}  // namespace

absl::StatusOr<SelectedDriver> SelectDriver(const DriverChoice& choice) {
  const bool has_spec = !choice.simulation_spec.empty();
  const bool config_nodes = choice.config != nullptr && choice.config->simulated_nodes.has_value();
  if (!choice.driver.empty() && choice.driver != "nvidia" && choice.driver != "simulated") {
    return absl::InvalidArgumentError(absl::StrCat("unknown driver '", choice.driver,
                                                   "' (use nvidia or simulated)"));
  }
  if (has_spec && config_nodes) {
    return absl::InvalidArgumentError(
        "both --simulate and a config file with nodes describe the pool; give one");
  }
  if (choice.driver == "nvidia") {
    if (has_spec || config_nodes) {
      return absl::InvalidArgumentError(
          "--driver nvidia discovers real GPUs; --simulate and config nodes are for --driver simulated");
    }
    absl::StatusOr<std::unique_ptr<NvidiaDriver>> nvidia = NvidiaDriver::Open();
    if (!nvidia.ok()) return nvidia.status();
    return SelectedDriver{std::move(*nvidia), ""};
  }

  // Explicitly simulated, or implied by a spec or configured nodes.
  if (choice.driver == "simulated" || has_spec || config_nodes) {
    absl::StatusOr<SimulatedPoolSpec> spec =
        config_nodes ? absl::StatusOr<SimulatedPoolSpec>(*choice.config->simulated_nodes)
                     : ParseSimulationSpec(has_spec ? choice.simulation_spec
                                                    : std::string(kDefaultSimulationSpec),
                                           choice.node_count);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<std::unique_ptr<DeviceDriver>> driver = Simulated(*spec);
    if (!driver.ok()) return driver.status();
    return SelectedDriver{std::move(*driver), ""};
  }

  // Nothing named: real GPUs when there are some.
  absl::StatusOr<std::unique_ptr<NvidiaDriver>> nvidia = NvidiaDriver::Open();
  std::string why;
  if (nvidia.ok()) {
    absl::StatusOr<std::vector<DiscoveredNode>> nodes = (*nvidia)->Discover();
    if (nodes.ok() && !nodes->empty() && !nodes->front().gpus.empty()) {
      return SelectedDriver{std::move(*nvidia), ""};
    }
    why = nodes.ok() ? "the NVIDIA driver reports no GPUs" : std::string(nodes.status().message());
  } else {
    why = std::string(nvidia.status().message());
  }
  absl::StatusOr<SimulatedPoolSpec> spec =
      ParseSimulationSpec(kDefaultSimulationSpec, choice.node_count);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<DeviceDriver>> driver = Simulated(*spec);
  if (!driver.ok()) return driver.status();
  return SelectedDriver{std::move(*driver),
                        absl::StrCat("gpupool: no NVIDIA GPU available (", why,
                                     "); using a simulated pool of ", DescribePool(*spec))};
}

}  // namespace gpupool::pool
