#include "pool/mig_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::pool {

MigLayout::MigLayout(const GpuModel& model) : model_(&model) {}

const MigPlacement* MigLayout::Holder(int slice) const {
  for (const MigPlacement& p : placements_) {
    if (slice >= p.start && slice < p.end()) return &p;
  }
  return nullptr;
}

int MigLayout::CountOf(const MigProfile& profile) const {
  return static_cast<int>(std::count_if(placements_.begin(), placements_.end(),
                                         [&](const MigPlacement& p) { return p.profile == &profile; }));
}

absl::Status MigLayout::CanAdd(const MigProfile& profile, int start) const {
  if (!model_->SupportsMig()) {
    return absl::FailedPreconditionError(absl::StrCat(model_->name, " does not support MIG"));
  }
  if (std::find(profile.allowed_starts.begin(), profile.allowed_starts.end(), start) ==
      profile.allowed_starts.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(profile.name, " cannot start at memory slice ", start, " on ", model_->name,
                     " (allowed starts: ", absl::StrJoin(profile.allowed_starts, ","), ")"));
  }
  if (CountOf(profile) >= profile.max_instances) {
    return absl::FailedPreconditionError(absl::StrCat("at most ", profile.max_instances, " ",
                                                      profile.name, " instance",
                                                      profile.max_instances == 1 ? "" : "s",
                                                      " fit on one ", model_->name));
  }
  if (profile.media_extensions) {
    for (const MigPlacement& p : placements_) {
      if (p.profile->media_extensions) {
        return absl::FailedPreconditionError(
            absl::StrCat(profile.name, " needs the media extensions, already owned by ",
                         p.profile->name, "@", p.start));
      }
    }
  }
  for (int slice = start; slice < start + profile.memory_slices; ++slice) {
    if (const MigPlacement* holder = Holder(slice)) {
      return absl::FailedPreconditionError(
          absl::StrCat(profile.name, "@", start, " needs memory slices ", start, "-",
                       start + profile.memory_slices - 1, " but ", holder->profile->name, "@",
                       holder->start, " holds slice ", slice));
    }
  }
  if (profile.compute_slices > FreeComputeSlices()) {
    return absl::FailedPreconditionError(
        absl::StrCat(profile.name, " needs ", profile.compute_slices, " compute slices but only ",
                     FreeComputeSlices(), " are free"));
  }
  return absl::OkStatus();
}

absl::Status MigLayout::Add(const MigProfile& profile, int start) {
  if (absl::Status s = CanAdd(profile, start); !s.ok()) return s;
  placements_.push_back({&profile, start});
  return absl::OkStatus();
}

absl::Status MigLayout::Remove(int start) {
  auto it = std::find_if(placements_.begin(), placements_.end(),
                         [&](const MigPlacement& p) { return p.start == start; });
  if (it == placements_.end()) {
    return absl::NotFoundError(absl::StrCat("no MIG instance starts at memory slice ", start));
  }
  placements_.erase(it);
  return absl::OkStatus();
}

std::vector<int> MigLayout::FreeStarts(const MigProfile& profile) const {
  std::vector<int> starts;
  for (int start : profile.allowed_starts) {
    if (CanAdd(profile, start).ok()) starts.push_back(start);
  }
  return starts;
}

const MigProfile* MigLayout::LargestPlaceable() const {
  const MigProfile* best = nullptr;
  for (const MigProfile& p : model_->mig_profiles) {
    if (FreeStarts(p).empty()) continue;
    if (best == nullptr || p.LargerThan(*best)) best = &p;
  }
  return best;
}

int MigLayout::FreeMemorySlices() const {
  int used = 0;
  for (const MigPlacement& p : placements_) used += p.size();
  return model_->mig_memory_slices - used;
}

int MigLayout::FreeComputeSlices() const {
  int used = 0;
  for (const MigPlacement& p : placements_) used += p.profile->compute_slices;
  return model_->mig_compute_slices - used;
}

std::string MigLayout::ToString() const {
  if (placements_.empty()) return "no instances";
  return absl::StrJoin(placements_, ", ", [](std::string* out, const MigPlacement& p) {
    absl::StrAppend(out, p.profile->name, "@", p.start);
  });
}

}  // namespace gpupool::pool
