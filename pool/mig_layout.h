// File: pool/mig_layout.h
//
// The MIG GPU instances carved on one GPU, and the hardware's rules for adding one: a profile
// starts only at one of its allowed slots, occupies `memory_slices` consecutive memory slices that
// no other instance holds, respects the profile's instance limit, and at most one instance per GPU
// owns the media extensions. These are the checks NVML makes when it creates a GPU instance; the
// simulated driver and the planner both use this class so they refuse exactly what hardware
// refuses.
//
//   MigLayout layout(*FindGpuModel("H100-80GB"));
//   absl::Status s = layout.Add(*model.FindMigProfile("3g.40gb"), 4);  // OK
//   s = layout.Add(*model.FindMigProfile("4g.40gb"), 0);  // OK: slices 0-3 are still free
//   s = layout.Add(*model.FindMigProfile("1g.10gb"), 6);  // FailedPrecondition: slice 6 is held
//
// Thread-compatible: const methods may run concurrently; mutation needs external locking.
#ifndef GPUPOOL_POOL_MIG_LAYOUT_H_
#define GPUPOOL_POOL_MIG_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pool/gpu_catalogue.h"

namespace gpupool::pool {

struct MigPlacement {
  const MigProfile* profile = nullptr;  // points into the catalogue
  int start = 0;                        // first memory slice
  int size() const { return profile->memory_slices; }
  int end() const { return start + profile->memory_slices; }  // one past the last slice
};

class MigLayout {
 public:
  // `model` must outlive the layout (catalogue models live for the whole program).
  explicit MigLayout(const GpuModel& model);

  const GpuModel& model() const { return *model_; }
  const std::vector<MigPlacement>& placements() const { return placements_; }

  // OK when `profile` could be created at `start` now; otherwise an error that names the rule
  // broken (InvalidArgument for a start the profile never allows, FailedPrecondition for a
  // conflict with instances already present).
  absl::Status CanAdd(const MigProfile& profile, int start) const;
  // CanAdd, then records the instance.
  absl::Status Add(const MigProfile& profile, int start);
  // Removes the instance starting at `start`; NotFound when there is none.
  absl::Status Remove(int start);

  // Start slots where `profile` could be created now, ascending.
  std::vector<int> FreeStarts(const MigProfile& profile) const;
  // The largest catalogue profile of this model that could still be created (nullptr when none).
  const MigProfile* LargestPlaceable() const;

  int FreeMemorySlices() const;
  int FreeComputeSlices() const;
  // "3g.40gb@4, 4g.40gb@0" (for messages).
  std::string ToString() const;

 private:
  // Instance occupying memory slice `slice`, or nullptr.
  const MigPlacement* Holder(int slice) const;
  int CountOf(const MigProfile& profile) const;

  const GpuModel* model_;
  std::vector<MigPlacement> placements_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_MIG_LAYOUT_H_
