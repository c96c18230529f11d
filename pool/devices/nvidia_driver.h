// File: pool/devices/nvidia_driver.h
//
// The DeviceDriver for real NVIDIA GPUs on the host it runs on: NVML for discovery, health and
// MIG, and the CUDA driver API for the one figure NVML lacks (the SM count). Both libraries are
// loaded with dlopen when the driver is opened, never linked, so a binary containing this driver
// runs on machines without one: Open() then fails with kUnavailable and the caller falls back
// (driver_selection.h).
//
//   absl::StatusOr<std::unique_ptr<NvidiaDriver>> driver = NvidiaDriver::Open();
//   if (!driver.ok()) return driver.status();  // kUnavailable: no NVIDIA driver on this host
//   absl::StatusOr<std::vector<DiscoveredNode>> nodes = (*driver)->Discover();
//
// One driver manages one node: the host's GPUs, in NVML index order. Every NVML function except
// the five needed to open is optional: on a driver too old to export one, the field it feeds is
// left unknown (-1, 0 or empty) rather than failing the call.
//
// MIG partitioning changes shared hardware, so the four partition calls are refused with
// kPermissionDenied unless NvidiaDriverOptions::allow_partitioning is set (and NVML itself needs
// root for them).
//
// Health: XID critical errors are collected through an NVML event set registered at Open();
// ReadHealth(gpu) hands out those seen on that GPU since its previous ReadHealth. A verdict that
// calls for repair (draining, lost) sticks to the GPU in Discover() for the driver's lifetime.
//
// Thread-safety: thread-safe. NVML is itself thread-safe; the driver's own state (events drained
// but not yet reported, sticky health) is guarded by a mutex.
//
// Source files: nvidia_driver.cc (opening and closing, discovery, health), nvidia_telemetry.cc
// (utilisation, memory, temperature, power and the last XID for monitoring), nvml_library.{h,cc}
// (dlopen of NVML and the CUDA driver, NVML errors as Status), nvidia_mig.{h,cc} (MIG listing and
// the four partition calls).
#ifndef GPUPOOL_POOL_DEVICES_NVIDIA_DRIVER_H_
#define GPUPOOL_POOL_DEVICES_NVIDIA_DRIVER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "pool/devices/device_driver.h"
#include "pool/devices/nvml_api.h"
#include "pool/devices/nvml_library.h"
#include "pool/gpu_catalogue.h"
#include "pool/health.h"

namespace gpupool::pool {

struct NvidiaDriverOptions {
  // NVML's library. Empty: $GPUPOOL_NVML_LIBRARY when set, else "libnvidia-ml.so.1".
  std::string nvml_library;
  // The CUDA driver library, used only for SM counts. Empty: "libcuda.so.1". Its absence is not
  // an error (sm_count is then 0).
  std::string cuda_library;
  // The node's name in the pool. Empty: the host name.
  std::string node_name;
  // Whether Create/Destroy{Gpu,Compute}Instance may change the hardware. Off by default: GPUs
  // are often shared (the project's lent test GPUs must never be repartitioned).
  bool allow_partitioning = false;
};

class NvidiaDriver final : public DeviceDriver {
 public:
  // Loads NVML, initialises it, and registers for XID events. kUnavailable when the library
  // cannot be loaded (the message names it and carries dlerror's text), lacks a required symbol,
  // or nvmlInit fails (no kernel driver, version mismatch); kPermissionDenied when NVML refuses
  // this user.
  static absl::StatusOr<std::unique_ptr<NvidiaDriver>> Open(NvidiaDriverOptions options = {});

  // Cheap probe: whether NVML's library (default path or $GPUPOOL_NVML_LIBRARY) can be loaded.
  // Does not initialise NVML, so a true answer does not promise that Open() succeeds.
  static bool DriverPresent();

  NvidiaDriver(const NvidiaDriver&) = delete;
  NvidiaDriver& operator=(const NvidiaDriver&) = delete;
  // Frees the event set, shuts NVML down and unloads it.
  ~NvidiaDriver() override;

  absl::string_view name() const override { return "nvidia"; }
  // Whether NVML took the registration for XID critical-error events on some GPU (false: the
  // driver does not offer them here, and health readings carry counters only).
  bool xid_events_registered() const { return loaded_.xid_events != nullptr; }
  const std::string& node_name() const { return node_name_; }

  absl::StatusOr<std::vector<DiscoveredNode>> Discover() override;
  absl::StatusOr<GpuHealthReading> ReadHealth(const GpuRef& gpu) override;
  // nvidia_telemetry.cc. Utilisation is unknown (-1) on MIG-enabled GPUs, where NVML does not
  // report it for the whole GPU.
  absl::StatusOr<GpuTelemetry> ReadTelemetry(const GpuRef& gpu) override;
  absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(const GpuRef& gpu, absl::string_view profile,
                                                    std::optional<int> start) override;
  absl::Status DestroyGpuInstance(const GpuRef& gpu, int gpu_instance_id) override;
  absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(const GpuRef& gpu,
                                                            int gpu_instance_id,
                                                            int compute_slices) override;
  absl::Status DestroyComputeInstance(const GpuRef& gpu, int gpu_instance_id,
                                      int compute_instance_id) override;

 private:
  // Everything Open() acquires; the driver owns it from construction on.
  struct Loaded {
    void* nvml_library = nullptr;  // dlopen handle
    void* cuda_library = nullptr;  // dlopen handle or null; loaded RTLD_NODELETE
    nvml::NvmlApi api;
    unsigned int device_count = 0;
    // What the CUDA driver reports, by canonical PCI bus id; used for non-MIG GPUs only.
    std::map<std::string, nvidia_internal::CudaDeviceFacts> cuda_devices;
    nvml::nvmlEventSet_t xid_events = nullptr;  // null when events are unsupported
  };

  NvidiaDriver(NvidiaDriverOptions options, std::string node_name, Loaded loaded);

  const nvml::NvmlApi& api() const { return loaded_.api; }
  // The NVML handle of `gpu`; kNotFound for another node or an index out of range.
  absl::StatusOr<nvml::nvmlDevice_t> Handle(const GpuRef& gpu) const;
  // `result` as a Status naming `call` and `gpu` (OK for NVML_SUCCESS).
  absl::Status NvmlError(nvml::nvmlReturn_t result, absl::string_view call,
                         const GpuRef& gpu) const;
  // The partition calls' checks (defined in nvidia_mig.cc, as is GpuInstance).
  absl::Status RequirePartitioning(absl::string_view operation, const GpuRef& gpu) const;
  absl::Status RequireMigEnabled(nvml::nvmlDevice_t device, const GpuRef& gpu) const;
  // The catalogue model of `gpu`, needed to map profile names to NVML profiles; kFailedPrecondition
  // when the GPU is not in the catalogue or its model has no MIG.
  absl::StatusOr<const GpuModel*> MigModel(nvml::nvmlDevice_t device, const GpuRef& gpu) const;
  absl::StatusOr<nvml::nvmlGpuInstance_t> GpuInstance(nvml::nvmlDevice_t device,
                                                      int gpu_instance_id,
                                                      const GpuRef& gpu) const;
  DiscoveredGpu DescribeGpu(int index);
  // Counters and state read now; `xids` stays empty (events are handled by the caller).
  GpuHealthReading ReadCounters(nvml::nvmlDevice_t device) const;

  // Moves every queued event from the NVML event set into pending_xids_.
  void DrainEventsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Assesses `reading` against the GPU's sticky state and records the verdict.
  HealthState AssessLocked(int index, const GpuHealthReading& reading)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const NvidiaDriverOptions options_;
  const std::string node_name_;
  const Loaded loaded_;

  mutable absl::Mutex mu_;
  // XIDs drained from the event set and not yet returned by ReadHealth, by NVML index.
  std::map<int, std::vector<int>> pending_xids_ ABSL_GUARDED_BY(mu_);
  // The newest XID drained per NVML index (telemetry's last XID; ReadHealth does not clear it).
  std::map<int, int> last_xid_ ABSL_GUARDED_BY(mu_);
  // The last verdict per NVML index, so that states needing repair persist.
  std::map<int, HealthState> last_health_ ABSL_GUARDED_BY(mu_);
};

// Pure helpers of the NVIDIA driver, exposed so that they can be tested without a GPU. The
// library path and NVML error mapping (NvmlLibraryPath, NvmlResultToStatus) are in
// nvml_library.h.
namespace nvidia_internal {

// How the driver's messages name a GPU: "<node>/<index>".
std::string GpuName(const GpuRef& gpu);

// A PCI bus id in the form the kernel uses in sysfs: lower case, the domain cut to 4 hex digits
// when its high digits are zero ("00000000:1B:00.0" -> "0000:1b:00.0"). NVML writes 8-digit
// domains and CUDA 4-digit ones; both map to the same string here. Trailing NULs and spaces are
// dropped; a string without ':' is only lower-cased.
std::string CanonicalPciBusId(absl::string_view bus_id);

// The NUMA node the kernel reports for a PCI device: <pci_devices_dir>/<canonical id>/numa_node.
// std::nullopt when the file cannot be read or parsed; -1 (the kernel's "no NUMA affinity") is
// returned as is.
std::optional<int> ReadSysfsNumaNode(absl::string_view pci_bus_id,
                                     const std::string& pci_devices_dir = "/sys/bus/pci/devices");

// The host's only NUMA node when it has exactly one (<nodes_dir>/online reads "0"): then every
// device is on it, whatever its own numa_node says (a virtual machine's PCI devices often say
// -1, as the lent H200 machine's did, where nvidia-smi topo -m shows NUMA affinity 0).
// std::nullopt with several nodes or when the file cannot be read.
std::optional<int> OnlyNumaNode(const std::string& nodes_dir = "/sys/devices/system/node");

// Sets nvlink_island on every GPU: GPUs connected by NVLink, directly or through shared endpoints
// such as NVSwitches, transitively, share an island "nvl<k>" (k counts islands in the order of
// their first GPU in `gpus`). A link counts when either end reports it, so a GPU whose own link
// query failed still joins its peers. A GPU no active link touches gets "gpu<index>". Matching
// is on canonical PCI bus ids.
void AssignNvLinkIslands(std::vector<DiscoveredGpu>& gpus);

}  // namespace nvidia_internal
}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_DEVICES_NVIDIA_DRIVER_H_
