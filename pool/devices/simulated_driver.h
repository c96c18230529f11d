// File: pool/devices/simulated_driver.h
//
// A DeviceDriver over simulated GPUs: any catalogue model, any number of nodes, MIG emulated with
// the same placement rules and refusals as the hardware (MigLayout is the single source of those
// rules), and faults injected by tests. It is the deliberate stand-in for machines without GPUs;
// what it reports has the shape and the semantics of what NVML reports.
//
//   auto driver = SimulatedDriver::Create(ParseSimulationSpec("8xH100-80GB").value());
//   driver->InjectXid({"node-0", 3}, 79);            // GPU 3 falls off the bus
//   driver->ReadHealth({"node-0", 3});               // reachable == false, xids == {79}
//   driver->CreateGpuInstance({"node-0", 3}, "1g.10gb", 0);   // Unavailable: GPU is lost
//
// Thread-safe.
#ifndef GPUPOOL_POOL_DEVICES_SIMULATED_DRIVER_H_
#define GPUPOOL_POOL_DEVICES_SIMULATED_DRIVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "pool/devices/device_driver.h"
#include "pool/devices/pool_spec.h"
#include "pool/mig_layout.h"

namespace gpupool::pool {

enum class EccErrorKind { kSingleBit, kDoubleBit };

class SimulatedDriver : public DeviceDriver {
 public:
  // Carves each MIG-enabled GPU's initial layout with the MIG planner; an impossible layout is an
  // InvalidArgument naming the node and GPU.
  static absl::StatusOr<std::unique_ptr<SimulatedDriver>> Create(SimulatedPoolSpec spec);

  absl::string_view name() const override { return "simulated"; }
  absl::StatusOr<std::vector<DiscoveredNode>> Discover() override;
  absl::StatusOr<GpuHealthReading> ReadHealth(const GpuRef& gpu) override;
  // An idle GPU unless SetActivity said otherwise: 0 % busy, no framebuffer in use, the
  // temperature SetThermalState set (40 C at first), an idle board's draw, the last XID injected.
  absl::StatusOr<GpuTelemetry> ReadTelemetry(const GpuRef& gpu) override;
  absl::StatusOr<GpuInstanceInfo> CreateGpuInstance(const GpuRef& gpu, absl::string_view profile,
                                                    std::optional<int> start) override;
  absl::Status DestroyGpuInstance(const GpuRef& gpu, int gpu_instance_id) override;
  absl::StatusOr<ComputeInstanceInfo> CreateComputeInstance(const GpuRef& gpu,
                                                            int gpu_instance_id,
                                                            int compute_slices) override;
  absl::Status DestroyComputeInstance(const GpuRef& gpu, int gpu_instance_id,
                                      int compute_instance_id) override;

  // --- Administration the real driver does out of band (nvidia-smi -mig 1 and a reset). ---
  // FailedPrecondition while instances exist, as the hardware refuses.
  absl::Status SetMigMode(const GpuRef& gpu, bool enabled);

  // --- Fault injection. Each returns NotFound for an unknown GPU. ---
  // An XID event as the driver would log it. 79 also makes the GPU unreachable; 48 and 94/95
  // also count an uncorrectable ECC error.
  absl::Status InjectXid(const GpuRef& gpu, int xid);
  // Single-bit errors are corrected and counted; a double-bit error is uncorrectable: counted,
  // XID 48 raised, and a row remap (Ampere and later) or page retirement (older) left pending.
  absl::Status InjectEccError(const GpuRef& gpu, EccErrorKind kind, int count = 1);
  // Silent data corruption: no counter shows it; only an active memory test finds it.
  absl::Status InjectSilentCorruption(const GpuRef& gpu);
  // The GPU falls off the bus (XID 79).
  absl::Status FallOffBus(const GpuRef& gpu) { return InjectXid(gpu, 79); }
  // Sets throttle-reason bits and temperature, as a hot or power-capped GPU reports them.
  absl::Status SetThermalState(const GpuRef& gpu, uint64_t throttle_reasons, int temperature_c);
  // What a busy GPU reports: its utilisation, framebuffer in use and power draw (watts).
  // InvalidArgument for a percentage outside 0..100, more memory than the GPU has, or negative
  // power.
  absl::Status SetActivity(const GpuRef& gpu, int utilization_percent, int64_t fb_used_mib, double power_watts);
  // A node repaired and the GPU reset: all faults and counters cleared.
  absl::Status Repair(const GpuRef& gpu);

  // A pattern test over the GPU's memory (what DCGM's memory diagnostic does): DataLoss when the
  // GPU corrupts data, after which ReadHealth reports data_corruption_detected.
  absl::Status RunMemoryTest(const GpuRef& gpu);
  // Whether data stored on this GPU comes back altered (the in-process memory stand-in asks).
  bool CorruptsData(const GpuRef& gpu) const;

 private:
  struct SimGpu {
    DiscoveredGpu device;
    const GpuModel* model = nullptr;
    std::unique_ptr<MigLayout> layout;  // present when MIG is enabled
    GpuHealthReading health;            // counters; xids pending since the last read
    GpuTelemetry activity;              // utilisation, memory in use, power (SetActivity)
    int last_xid = 0;                   // the newest XID injected; telemetry's, never cleared by reads
    bool corrupts_data = false;
  };
  struct SimNode {
    DiscoveredNode info;  // gpus are kept in SimGpu; info.gpus is filled by Discover
    std::vector<SimGpu> gpus;
  };

  explicit SimulatedDriver(std::vector<SimNode> nodes);
  absl::StatusOr<SimGpu*> FindGpu(const GpuRef& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<SimGpu*> FindReachableMigGpu(const GpuRef& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::StatusOr<GpuInstanceInfo> AddInstance(SimGpu& gpu, const MigProfile& profile,
                                                     std::optional<int> start);

  mutable absl::Mutex mu_;
  std::vector<SimNode> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_DEVICES_SIMULATED_DRIVER_H_
