#include "runtime/agent/device_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/http/prometheus_text.h"

namespace gpupool::runtime {
namespace {

struct Family {
  const char* name;
  const char* help;  // dcgm-exporter's own help text, so the two read alike
};
constexpr Family kUtil{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."};
constexpr Family kFbUsed{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."};
constexpr Family kFbFree{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."};
constexpr Family kTemp{"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."};
constexpr Family kPower{"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."};
constexpr Family kXid{"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."};

struct Reading {
  std::string gpu, device;
  const pool::DiscoveredGpu* info = nullptr;
  pool::GpuTelemetry telemetry;
};

}  // namespace

std::string RenderDeviceMetrics(const DeviceMetricsSource& source) {
  // Read every GPU once, then write family by family, as the text format wants each family's
  // samples together.
  std::vector<Reading> readings;
  for (const pool::DiscoveredGpu& g : source.gpus) {
    absl::StatusOr<pool::GpuTelemetry> t = source.driver->ReadTelemetry(pool::GpuRef{source.driver_node, g.index});
    // A GPU the driver no longer knows, or a driver without telemetry, has no series at all.
    if (!t.ok()) continue;
    readings.push_back(Reading{absl::StrCat(g.index), absl::StrCat("nvidia", g.index), &g, *t});
  }
  PrometheusText out;
  auto family = [&](const Family& f, auto value_of) {
    out.Family(f.name, "gauge", f.help);
    for (const Reading& r : readings) {
      double v = value_of(r.telemetry);
      if (v < 0) continue;
      out.Sample(f.name, {{"gpu", r.gpu}, {"UUID", r.info->uuid}, {"pci_bus_id", r.info->pci_bus_id},
                          {"device", r.device}, {"modelName", r.info->name}, {"Hostname", source.hostname}},
                 v);
    }
  };
  // A lost GPU reports only its last XID (the other figures are -1 in its reading).
  family(kUtil, [](const pool::GpuTelemetry& t) { return t.reachable ? t.utilization_percent : -1.0; });
  family(kFbUsed, [](const pool::GpuTelemetry& t) { return t.reachable ? static_cast<double>(t.fb_used_mib) : -1.0; });
  family(kFbFree, [](const pool::GpuTelemetry& t) { return t.reachable ? static_cast<double>(t.fb_free_mib) : -1.0; });
  family(kTemp, [](const pool::GpuTelemetry& t) { return t.reachable ? t.temperature_c : -1.0; });
  family(kPower, [](const pool::GpuTelemetry& t) { return t.reachable ? t.power_watts : -1.0; });
  family(kXid, [](const pool::GpuTelemetry& t) { return static_cast<double>(t.last_xid); });
  return out.Take();
}

absl::StatusOr<std::unique_ptr<DeviceMetricsEndpoint>> DeviceMetricsEndpoint::Start(const HttpServerOptions& options,
                                                                                    DeviceMetricsSource source) {
  std::unique_ptr<DeviceMetricsEndpoint> endpoint(new DeviceMetricsEndpoint(std::move(source)));
  const DeviceMetricsSource* src = &endpoint->source_;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options, [src](const HttpRequest& r) {
    if (r.path == "/metrics") {
      return HttpResponse{.content_type = "text/plain; version=0.0.4; charset=utf-8", .body = RenderDeviceMetrics(*src)};
    }
    return HttpResponse{.status = 404, .body = absl::StrCat("no page ", r.path, "; the device metrics are at /metrics\n")};
  });
  if (!server.ok()) return server.status();
  endpoint->server_ = *std::move(server);
  return endpoint;
}

}  // namespace gpupool::runtime
