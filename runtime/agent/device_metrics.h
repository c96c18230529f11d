// File: runtime/agent/device_metrics.h
//
// The node's device metrics, as dcgm-exporter names and labels them, so that the Grafana boards
// and alerts written for dcgm-exporter work on a gpupool node unchanged (gpupool agent
// --http-listen). Per GPU:
//   DCGM_FI_DEV_GPU_UTIL      utilisation, %            DCGM_FI_DEV_GPU_TEMP      temperature, C
//   DCGM_FI_DEV_FB_USED       framebuffer in use, MiB   DCGM_FI_DEV_POWER_USAGE   power draw, W
//   DCGM_FI_DEV_FB_FREE       framebuffer free, MiB     DCGM_FI_DEV_XID_ERRORS    the last XID (a gauge)
// labelled gpu (the index), UUID, pci_bus_id, device ("nvidia<index>"), modelName (the driver's
// name for the GPU) and Hostname (the node's name in the pool, as dcgm-exporter on Kubernetes
// takes the node's name, so a GPU's series joins the head's gpupool_* series by node). A figure
// the driver cannot give (gpu_telemetry.h: -1) is left out, not reported as 0; a GPU that cannot
// be reached reports only its last XID. No per-MIG-instance series (dcgm-exporter's GPU_I_ID).
//
//   DeviceMetricsSource source{.driver = driver, .driver_node = "node-0", .gpus = node.gpus,
//                              .hostname = "gpu-17"};
//   absl::StatusOr<std::unique_ptr<DeviceMetricsEndpoint>> endpoint =
//       DeviceMetricsEndpoint::Start({.address = "127.0.0.1", .port = 9400}, std::move(source));
//
// No token, as dcgm-exporter has none: the endpoint is loopback-only unless the operator allows
// the network (HttpServerOptions::allow_network), it answers GET /metrics and nothing else holds
// data, and the HttpServer's bounds hold for what a peer sends.
// Threads: rendering reads the driver (thread-safe) on the HTTP server's thread.
#ifndef GPUPOOL_RUNTIME_AGENT_DEVICE_METRICS_H_
#define GPUPOOL_RUNTIME_AGENT_DEVICE_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/devices/device_driver.h"
#include "runtime/http/http_server.h"

namespace gpupool::runtime {

struct DeviceMetricsSource {
  pool::DeviceDriver* driver = nullptr;  // not owned; outlives the endpoint
  std::string driver_node;               // the node's name in the driver (GpuRef::node)
  std::vector<pool::DiscoveredGpu> gpus; // as discovered: index, UUID, name, PCI bus id
  std::string hostname;                  // the Hostname label
};

// The Prometheus text of every GPU in `source`, read now.
std::string RenderDeviceMetrics(const DeviceMetricsSource& source);

class DeviceMetricsEndpoint {
 public:
  // Errors as HttpServer::Start's: InvalidArgument for a non-loopback address without
  // allow_network, Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<DeviceMetricsEndpoint>> Start(const HttpServerOptions& options,
                                                                       DeviceMetricsSource source);
  uint16_t port() const { return server_->port(); }

 private:
  explicit DeviceMetricsEndpoint(DeviceMetricsSource source) : source_(std::move(source)) {}

  const DeviceMetricsSource source_;
  std::unique_ptr<HttpServer> server_;  // destroyed first: its thread reads source_
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_DEVICE_METRICS_H_
