// File: pool/devices/nvidia_mig.h
//
// How NvidiaDriver reads a GPU's MIG state from NVML: the MIG mode, and the GPU instances with
// their compute instances and MIG device UUIDs. nvidia_mig.cc also holds the driver's four
// partition calls (NvidiaDriver::Create/Destroy{Gpu,Compute}Instance), which are declared in
// nvidia_driver.h with the rest of the class.
//
//   MigMode mode = nvidia_internal::ReadMigMode(api, device, &gpu.labels);
//   if (mode == MigMode::kEnabled) {
//     gpu.instances = nvidia_internal::ReadMigInstances(api, device, model);
//   }
//
// Only the NVIDIA driver's own source files include this header.
// Thread-safety: the functions are thread-safe (NVML is); they keep no state.
#ifndef GPUPOOL_POOL_DEVICES_NVIDIA_MIG_H_
#define GPUPOOL_POOL_DEVICES_NVIDIA_MIG_H_

#include <map>
#include <string>
#include <vector>

#include "pool/devices/device_driver.h"
#include "pool/devices/nvml_api.h"
#include "pool/gpu_catalogue.h"

namespace gpupool::pool::nvidia_internal {

// The current MIG mode of `device`; kUnsupported when NVML cannot say. When `labels` is not null
// and a change is pending (it takes effect after a GPU reset), sets "nvidia.mig_mode_pending" to
// the pending mode, so that an operator sees why the mode is not yet what they set.
MigMode ReadMigMode(const nvml::NvmlApi& api, nvml::nvmlDevice_t device,
                    std::map<std::string, std::string>* labels);

// Every GPU instance on `device`, ordered by first memory slice (then id), each with its compute
// instances (by id) and their MIG device UUIDs; GpuInstanceInfo::uuid is that of its
// lowest-numbered compute instance. `model` (null when the GPU is not in the catalogue) names the
// profiles; a profile the catalogue lacks is described from NVML's figures. What NVML cannot
// report is left out or empty rather than failing.
std::vector<GpuInstanceInfo> ReadMigInstances(const nvml::NvmlApi& api, nvml::nvmlDevice_t device,
                                              const GpuModel* model);

}  // namespace gpupool::pool::nvidia_internal

#endif  // GPUPOOL_POOL_DEVICES_NVIDIA_MIG_H_
