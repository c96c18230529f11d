// File: pool/devices/device_driver.h
//
// The one interface between the pool and GPU hardware: discover what exists, read its health,
// carve MIG partitions. Two implementations: NvidiaDriver (NVML and the CUDA driver API, loaded
// with dlopen at run time) and SimulatedDriver (catalogue models, MIG emulated with the hardware's
// placement rules, injectable faults). Everything above this interface is the same for both.
//
//   std::unique_ptr<DeviceDriver> driver = ...;   // see driver_selection.h
//   absl::StatusOr<std::vector<DiscoveredNode>> nodes = driver->Discover();
//   absl::StatusOr<GpuHealthReading> h = driver->ReadHealth({"node-0", 3});
//
// Errors: kUnavailable when the hardware (or the whole driver) cannot be reached, kNotFound for a
// GPU or instance that does not exist, kFailedPrecondition for a partition the hardware refuses,
// kPermissionDenied when the driver refuses an administrative operation.
// Thread-safety: implementations are thread-safe.
#ifndef GPUPOOL_POOL_DEVICES_DEVICE_DRIVER_H_
#define GPUPOOL_POOL_DEVICES_DEVICE_DRIVER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/devices/gpu_telemetry.h"
#include "pool/health.h"

namespace gpupool::pool {

enum class MigMode { kUnsupported, kDisabled, kEnabled };
absl::string_view MigModeName(MigMode mode);  // "unsupported" | "disabled" | "enabled"

// Which GPU: the node's name and the GPU's index on that node (NVML index for real GPUs).
struct GpuRef {
  std::string node;
  int index = 0;
  friend bool operator==(const GpuRef&, const GpuRef&) = default;
};

struct ComputeInstanceInfo {
  int id = 0;              // compute instance id inside its GPU instance
  std::string profile;     // "1c.3g.40gb", or the GPU instance's name when it spans it
  int compute_slices = 0;
  std::string uuid;        // MIG device UUID ("MIG-...") when the driver reports one
};

struct GpuInstanceInfo {
  int id = 0;              // GPU instance id
  std::string profile;     // "3g.40gb"
  int start = 0;           // first memory slice
  int size = 0;            // memory slices
  // MIG device UUID ("MIG-...") of its first (lowest-numbered) compute instance when the driver
  // reports one: a MIG device is a compute instance, and this serves callers that address a GPU
  // instance as one device. Empty while the GPU instance has no compute instance.
  std::string uuid;
  std::vector<ComputeInstanceInfo> compute_instances;
};

struct NvLinkPeer {
  std::string peer_pci_bus_id;  // the remote end of the link
  int links = 0;                // active links to that peer
};

struct DiscoveredGpu {
  int index = 0;
  std::string name;            // the device's own name: "NVIDIA H100 80GB HBM3"
  std::string model;           // catalogue name ("H100-80GB"), empty when not in the catalogue
  std::string uuid;            // "GPU-..."
  uint64_t memory_mib = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  MigMode mig_mode = MigMode::kUnsupported;
  std::vector<GpuInstanceInfo> instances;
  std::string pci_bus_id;      // "00000000:19:00.0"
  int numa_node = -1;          // -1 when unknown
  std::vector<NvLinkPeer> nvlink_peers;
  std::string nvlink_island;   // GPUs of one node with the same island reach each other by NVLink
  std::map<std::string, std::string> labels;
  HealthState health = HealthState::kHealthy;
};

struct DiscoveredNode {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<DiscoveredGpu> gpus;
  // The host's CPU (milli-cores) and memory that GPU work may ask for beside its GPUs; 0 when not
  // declared, and then requests' CPU and memory are not counted against this node.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

class DeviceDriver {
 public:
  virtual ~DeviceDriver() = default;

  // "nvidia" or "simulated".
  virtual absl::string_view name() const = 0;

  // Every node and GPU this driver manages, with MIG instances as they are now.
  virtual absl::StatusOr<std::vector<DiscoveredNode>> Discover() = 0;

  // Counters and events read now. XID events are those seen since the previous call.
  virtual absl::StatusOr<GpuHealthReading> ReadHealth(const GpuRef& gpu) = 0;

  // Activity figures read now, for monitoring (gpu_telemetry.h). Never consumes the XID events
  // ReadHealth hands out. kNotFound for an unknown GPU; a GPU that cannot be reached answers OK
  // with reachable == false. The default answers kUnimplemented (a driver without telemetry).
  virtual absl::StatusOr<GpuTelemetry> ReadTelemetry(const GpuRef& gpu);

  // Creates a GPU instance of `profile` ("3g.40gb") at memory slice `start` (or where the
  // hardware chooses when absent). MIG mode must already be enabled on the GPU.
  virtual absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(const GpuRef& gpu,
                                                            absl::string_view profile,
                                                            std::optional<int> start) = 0;
  // Destroys a GPU instance; its compute instances must have been destroyed first.
  virtual absl::Status DestroyGpuInstance(const GpuRef& gpu, int gpu_instance_id) = 0;
  // Creates a compute instance of `compute_slices` inside a GPU instance.
  virtual absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(const GpuRef& gpu,
                                                                    int gpu_instance_id,
                                                                    int compute_slices) = 0;
  virtual absl::Status DestroyComputeInstance(const GpuRef& gpu, int gpu_instance_id,
                                              int compute_instance_id) = 0;
};

// This machine's host name ("localhost" if it has none): a node's name unless one is configured,
// and part of a process's identity wherever pids alone could collide across machines.
std::string HostName();

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_DEVICES_DEVICE_DRIVER_H_
