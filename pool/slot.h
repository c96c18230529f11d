// File: pool/slot.h
//
// A slot is what one lease holds on one GPU. Four kinds, from strongest isolation to weakest:
//   - whole GPU
//   - MIG instance (hardware-isolated memory and compute; a catalogue profile such as 3g.40gb)
//   - MPS share (a CUDA MPS client: active-thread percentage plus a pinned device-memory limit;
//     memory-limited but faults are shared with the GPU's other clients)
//   - in-process fraction (a memory budget plus a compute share, enforced by gpupool's own
//     per-lease memory pool inside one process; for trusted sharing)
// A GPU serves one kind at a time (it is whole, or MIG-partitioned, or an MPS server, or shared
// by fractions), which is how the hardware and the MPS daemon work.
//
// SlotShape says what a request wants; GpuSlots tracks what is carved on one GPU and refuses
// what does not fit, naming why.
//
//   GpuSlots gpu(*FindGpuModel("H100-80GB"));
//   auto a = gpu.Carve(SlotShape::Fraction(/*memory_mib=*/20480, /*compute_milli=*/250));
//   auto b = gpu.Carve(SlotShape::WholeGpu());   // FailedPrecondition: shared by fractions
//
// Thread-compatible.
#ifndef GPUPOOL_POOL_SLOT_H_
#define GPUPOOL_POOL_SLOT_H_

#include <cstdint>
#include <map>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/gpu_catalogue.h"
#include "pool/mig_layout.h"

namespace gpupool::pool {

enum class SlotKind { kWholeGpu, kMig, kMps, kFraction };
absl::string_view SlotKindName(SlotKind kind);  // "whole", "mig", "mps", "fraction"

// Limits of the sharing mechanisms (NVIDIA MPS documentation: 48 clients per GPU through
// CUDA 13.0; a fraction is a host-enforced budget, so its floor is a practical one).
inline constexpr int kMaxMpsClientsPerGpu = 48;
inline constexpr int kMinFractionMemoryMib = 256;

struct SlotShape {
  SlotKind kind = SlotKind::kWholeGpu;
  std::string mig_profile;        // kMig: "3g.40gb"
  int mps_thread_percentage = 0;  // kMps: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1..100
  int64_t memory_mib = 0;         // kMps: pinned device-memory limit; kFraction: memory budget
  int compute_milli = 0;          // kFraction: share of the GPU's compute, 1..1000
  // Host resources that go with the slot, on the GPU's node (any kind): CPU in milli-cores and
  // host memory in MiB. 0 asks for none. Counted only against nodes that declare their capacity.
  int64_t cpu_milli = 0;
  int64_t host_memory_mib = 0;

  static SlotShape WholeGpu() { return {}; }
  static SlotShape Mig(std::string profile) {
    SlotShape s;
    s.kind = SlotKind::kMig;
    s.mig_profile = std::move(profile);
    return s;
  }
  static SlotShape Mps(int thread_percentage, int64_t memory_mib) {
    SlotShape s;
    s.kind = SlotKind::kMps;
    s.mps_thread_percentage = thread_percentage;
    s.memory_mib = memory_mib;
    return s;
  }
  static SlotShape Fraction(int64_t memory_mib, int compute_milli) {
    SlotShape s;
    s.kind = SlotKind::kFraction;
    s.memory_mib = memory_mib;
    s.compute_milli = compute_milli;
    return s;
  }

  // Host CPU and memory on a GPU's node and nothing of the GPU (a fraction of no compute and no
  // GPU memory): CPU work beside GPU work, which must be placed where it leaves GPUs usable.
  static SlotShape HostOnly(int64_t cpu_milli, int64_t host_memory_mib) {
    SlotShape s;
    s.kind = SlotKind::kFraction;
    s.cpu_milli = cpu_milli;
    s.host_memory_mib = host_memory_mib;
    return s;
  }
  bool host_only() const {
    return kind == SlotKind::kFraction && compute_milli == 0 && memory_mib == 0;
  }
  // "whole", "mig:3g.40gb", "mps:25%/20480MiB", "fraction:20480MiB/250m"; with host resources
  // "+cpu:8000m" and "+mem:65536MiB" appended.
  std::string ToString() const;
};

// Compute one slot of `shape` takes from its GPU, in milli-GPUs: what placement subtracts and what
// quotas and accounting charge. A MIG slot's share is its compute slices out of the model's; with
// no model (or an unknown profile) a MIG slot counts as a whole GPU.
int SlotComputeMilli(const SlotShape& shape, const GpuModel* model = nullptr);

// Checks a shape against a GPU model: the MIG profile exists there, percentages and budgets are
// in range and fit the GPU's memory. The error names the field and what is allowed.
absl::Status ValidateSlotShape(const SlotShape& shape, const GpuModel& model);

// The slots carved on one GPU.
class GpuSlots {
 public:
  // `model` must outlive this object (catalogue models do).
  explicit GpuSlots(const GpuModel& model);

  const GpuModel& model() const { return *model_; }
  // The kind this GPU currently serves; nullopt-like kWholeGpu with no slots means "free".
  bool empty() const { return slots_.empty(); }
  SlotKind serving() const { return serving_; }
  const MigLayout& mig_layout() const { return mig_; }

  // Carves a slot, returning its id (unique on this GPU). The shape is validated first.
  absl::StatusOr<int> Carve(const SlotShape& shape);
  // Like Carve but only checks.
  absl::Status CanCarve(const SlotShape& shape) const;
  absl::Status Release(int slot_id);

  // What is left for each kind, for scoring and messages.
  int64_t FreeMemoryMib() const;
  int FreeComputeMilli() const;
  int slot_count() const { return static_cast<int>(slots_.size()); }

 private:
  struct Carved {
    SlotShape shape;
    int mig_start = -1;  // kMig only
  };
  absl::Status CheckFits(const SlotShape& shape, int* mig_start) const;

  const GpuModel* model_;
  SlotKind serving_ = SlotKind::kWholeGpu;
  MigLayout mig_;
  std::map<int, Carved> slots_;
  int next_id_ = 1;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SLOT_H_
