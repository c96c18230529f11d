// File: pool/devices/driver_selection.h
//
// Picks the device driver a program uses, the same way for the CLI, the embedded pool and the
// agent:
//   - `driver == "nvidia"`: the NVIDIA driver; an error when libnvidia-ml.so.1 cannot be loaded.
//   - `driver == "simulated"`, or a simulation spec or config file with simulated nodes: a
//     simulated pool from them (the default spec when neither is given).
//   - no driver named: NVIDIA when a driver and at least one GPU are present, otherwise the default
//     simulated pool, with one line saying so (returned in `notice`, printed by the caller on
//     stderr).
#ifndef GPUPOOL_POOL_DEVICES_DRIVER_SELECTION_H_
#define GPUPOOL_POOL_DEVICES_DRIVER_SELECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "pool/devices/device_driver.h"
#include "pool/config/pool_config.h"

namespace gpupool::pool {

struct DriverChoice {
  std::string driver;            // "", "nvidia" or "simulated"
  std::string simulation_spec;   // COUNTxMODEL,... ; empty: from the config or the default
  int node_count = 1;            // repeats the spec's node
  const PoolConfig* config = nullptr;  // may carry simulated nodes; not owned
};

struct SelectedDriver {
  std::unique_ptr<DeviceDriver> driver;
  std::string notice;  // one line for stderr when the choice was automatic; empty otherwise
};

// InvalidArgument for a bad choice (unknown driver name, a spec together with --driver nvidia,
// a malformed spec); Unavailable when --driver nvidia was named and the driver is not present.
absl::StatusOr<SelectedDriver> SelectDriver(const DriverChoice& choice);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_DEVICES_DRIVER_SELECTION_H_
