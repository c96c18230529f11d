// NvidiaDriver::ReadTelemetry: the figures dcgm-exporter reports by default, read from NVML with
// the entry points loaded at Open() (each optional: a figure the driver or GPU cannot give stays
// -1). The last XID comes from the event set the health reads drain; draining here files the
// events for ReadHealth as well, so a scrape never hides one from the health checks.
#include <cstdint>

#include "pool/devices/nvidia_driver.h"
#include "pool/devices/nvml_library.h"

namespace gpupool::pool {

using namespace nvml;  // NOLINT(build/namespaces)
using nvidia_internal::Call;

absl::StatusOr<GpuTelemetry> NvidiaDriver::ReadTelemetry(const GpuRef& gpu) {
  GpuTelemetry t;
  absl::StatusOr<nvmlDevice_t> device = Handle(gpu);
  if (device.ok()) {
    const NvmlApi& api = this->api();
    bool lost = false;
    auto ok = [&lost](nvmlReturn_t r) {
      lost = lost || r == NVML_ERROR_GPU_IS_LOST;
      return r == NVML_SUCCESS;
    };
    nvmlUtilization_t utilization{};
    if (ok(Call(api.nvmlDeviceGetUtilizationRates, *device, &utilization))) {
      t.utilization_percent = static_cast<int>(utilization.gpu);
    }
    nvmlMemory_t memory{};
    if (ok(Call(api.nvmlDeviceGetMemoryInfo, *device, &memory))) {
      constexpr uint64_t kMiB = 1024 * 1024;
      t.fb_used_mib = static_cast<int64_t>(memory.used / kMiB);
      t.fb_free_mib = static_cast<int64_t>(memory.free / kMiB);
    }
    unsigned int temperature = 0;
    if (ok(Call(api.nvmlDeviceGetTemperature, *device, NVML_TEMPERATURE_GPU, &temperature))) {
      t.temperature_c = static_cast<int>(temperature);
    }
    unsigned int milliwatts = 0;
    if (ok(Call(api.nvmlDeviceGetPowerUsage, *device, &milliwatts))) t.power_watts = milliwatts / 1000.0;
    if (lost) t = GpuTelemetry{.reachable = false};  // half a reading of a lost GPU means nothing
  } else if (absl::IsUnavailable(device.status())) {
    t.reachable = false;  // it exists (Handle checked the index) but cannot be reached
  } else {
    return device.status();
  }
  absl::MutexLock lock(&mu_);
  DrainEventsLocked();
  if (auto it = last_xid_.find(gpu.index); it != last_xid_.end()) t.last_xid = it->second;
  return t;
}

}  // namespace gpupool::pool
