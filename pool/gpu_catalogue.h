// File: pool/gpu_catalogue.h
//
// The GPU models gpupool knows, with the figures the scheduler, the MIG planner and accounting
// need: memory, SMs, compute capability, NVLink, the exact MIG GPU-instance profiles with their
// placement rules, the compute-instance profiles inside them, and a default price per GPU-hour.
//
// The catalogue is immutable data compiled into the binary; prices are only defaults (the pool's
// configuration overrides them). Lookups are case-insensitive on the catalogue name
// ("h100-80gb" finds "H100-80GB").
//
//   const GpuModel* h100 = FindGpuModel("H100-80GB");
//   const MigProfile* p = h100->FindMigProfile("3g.40gb");   // p->allowed_starts == {0, 4}
//
// Thread-safety: everything here is read-only after static initialisation.
#ifndef GPUPOOL_POOL_GPU_CATALOGUE_H_
#define GPUPOOL_POOL_GPU_CATALOGUE_H_

#include <cstdint>
#include <span>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace gpupool::pool {

// A MIG GPU-instance profile. Placement is on the memory-slice axis: an instance occupies
// `memory_slices` consecutive slices beginning at one of `allowed_starts`; two instances may not
// share a slice. This is the rule NVML enforces (nvmlGpuInstancePlacement_t {start, size}).
struct MigProfile {
  std::string name;              // as nvidia-smi writes it: "1g.10gb", "1g.10gb+me"
  int compute_slices = 0;        // the "Ng" part: out of the GPU's mig_compute_slices
  int memory_slices = 0;         // placement size on the memory-slice axis
  int memory_mib = 0;            // usable memory of one instance (approximate, as NVML reports)
  int sm_count = 0;              // SMs of one instance
  int max_instances = 0;         // at most this many on one GPU
  bool media_extensions = false; // "+me": owns the GPU's NVDEC/NVJPG/OFA units (one per GPU)
  std::vector<int> allowed_starts;
  int nvml_profile = 0;          // NVML_GPU_INSTANCE_PROFILE_* index, for the NVIDIA driver

  // The profile's size for "largest" comparisons: memory first, then compute.
  bool LargerThan(const MigProfile& other) const {
    if (memory_slices != other.memory_slices) return memory_slices > other.memory_slices;
    return compute_slices > other.compute_slices;
  }
};

// A compute-instance profile inside a GPU instance: a subset of that instance's compute slices
// sharing its memory. Named like nvidia-smi: "1c.3g.40gb"; the full-size one has the GPU
// instance's own name.
struct ComputeInstanceProfile {
  int compute_slices = 0;
  int nvml_profile = 0;  // NVML_COMPUTE_INSTANCE_PROFILE_* index
};

struct NvLinkSpec {
  int links = 0;               // per GPU
  double bandwidth_gbps = 0;   // total bidirectional GB/s per GPU
};

struct GpuModel {
  std::string name;             // catalogue name: "H100-80GB"
  std::string marketing_name;   // what the driver reports: "NVIDIA H100 80GB HBM3"
  std::vector<std::string> driver_names;  // substrings of driver names that identify the model
  int memory_mib = 0;           // usable memory as nvidia-smi reports it
  int sm_count = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  NvLinkSpec nvlink;
  double default_price_per_hour = 0;  // USD, a list-price default; configuration overrides it
  // MIG: zero slices means the model does not support MIG.
  int mig_memory_slices = 0;
  int mig_compute_slices = 0;
  std::vector<MigProfile> mig_profiles;  // largest first

  bool SupportsMig() const { return mig_memory_slices > 0; }
  // Case-insensitive; accepts an optional "MIG " prefix as nvidia-smi prints it.
  const MigProfile* FindMigProfile(absl::string_view profile_name) const;
  // Compute-instance profiles valid inside an instance of `gpu_instance` (largest first).
  std::vector<ComputeInstanceProfile> ComputeProfilesFor(const MigProfile& gpu_instance) const;
  // "1c.3g.40gb", or the GPU instance's name when the compute instance spans all of it.
  static std::string ComputeProfileName(const MigProfile& gpu_instance, int compute_slices);
  int MemoryGb() const { return (memory_mib + 1023) / 1024; }
};

// All catalogue models, in a stable order.
std::span<const GpuModel> GpuCatalogue();

// Case-insensitive lookup by catalogue name; nullptr when unknown.
const GpuModel* FindGpuModel(absl::string_view name);

// Like FindGpuModel, but an unknown name is an InvalidArgument error that lists the known ones.
absl::StatusOr<const GpuModel*> RequireGpuModel(absl::string_view name);

// Maps what a driver reports (device name and memory) to a catalogue model; nullptr when the GPU
// is not in the catalogue (it is still usable as a whole GPU, just without MIG planning).
const GpuModel* MatchDriverReportedModel(absl::string_view device_name, uint64_t memory_mib);

// "A100-40GB, A100-80GB, ..." for error messages.
std::string KnownGpuModelNames();

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_GPU_CATALOGUE_H_
