// File: pool/devices/gpu_telemetry.h
//
// What a GPU reports about its current activity, for monitoring (the agent's dcgm-exporter-style
// /metrics): utilisation, framebuffer memory, temperature, power draw and the last XID. Distinct
// from GpuHealthReading (pool/health.h), which feeds scheduling decisions: reading telemetry never
// consumes health events, so a scrape cannot hide an XID from the health checks.
//
//   absl::StatusOr<GpuTelemetry> t = driver->ReadTelemetry({"node-0", 0});
//   if (t.ok() && t->power_watts >= 0) ...;
//
// Every figure is -1 when the GPU or the driver cannot report it (NVML's NOT_SUPPORTED, a GPU
// that is lost, a MIG-enabled GPU's utilisation); monitoring then leaves the sample out rather
// than reporting a made-up value.
#ifndef GPUPOOL_POOL_DEVICES_GPU_TELEMETRY_H_
#define GPUPOOL_POOL_DEVICES_GPU_TELEMETRY_H_

#include <cstdint>

namespace gpupool::pool {

struct GpuTelemetry {
  bool reachable = true;          // false: the GPU has fallen off the bus or cannot be reached
  int utilization_percent = -1;   // time a kernel ran over the driver's last sample period
  int64_t fb_used_mib = -1;       // framebuffer memory in use
  int64_t fb_free_mib = -1;       // framebuffer memory free
  int temperature_c = -1;
  double power_watts = -1;        // board power draw
  // The most recent XID the driver reported for this GPU since the driver was opened (0: none).
  // A gauge, as dcgm-exporter's DCGM_FI_DEV_XID_ERRORS is.
  int last_xid = 0;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_DEVICES_GPU_TELEMETRY_H_
