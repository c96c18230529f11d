#include "absl/strings/string_view.h"
#include "pool/slot.h"

#include "absl/strings/str_cat.h"
#include "pool/mig_planner.h"

namespace gpupool::pool {

absl::string_view SlotKindName(SlotKind kind) {
  switch (kind) {
    case SlotKind::kWholeGpu: return "whole";
    case SlotKind::kMig: return "mig";
    case SlotKind::kMps: return "mps";
    case SlotKind::kFraction: return "fraction";
  }
  return "unknown";
}

std::string SlotShape::ToString() const {
  std::string out;
  switch (kind) {
    case SlotKind::kWholeGpu: out = "whole"; break;
    case SlotKind::kMig: out = absl::StrCat("mig:", mig_profile); break;
    case SlotKind::kMps: out = absl::StrCat("mps:", mps_thread_percentage, "%/", memory_mib, "MiB"); break;
    case SlotKind::kFraction: out = absl::StrCat("fraction:", memory_mib, "MiB/", compute_milli, "m"); break;
  }
  if (cpu_milli > 0) absl::StrAppend(&out, "+cpu:", cpu_milli, "m");
  if (host_memory_mib > 0) absl::StrAppend(&out, "+host-memory:", host_memory_mib, "MiB");
  return out;
}

int SlotComputeMilli(const SlotShape& shape, const GpuModel* model) {
  switch (shape.kind) {
    case SlotKind::kWholeGpu: return 1000;
    case SlotKind::kFraction: return shape.compute_milli;
    case SlotKind::kMps: return shape.mps_thread_percentage * 10;
    case SlotKind::kMig: {
      const MigProfile* p = model == nullptr ? nullptr : model->FindMigProfile(shape.mig_profile);
      return p == nullptr ? 1000 : 1000 * p->compute_slices / model->mig_compute_slices;
    }
  }
  return 1000;
}

absl::Status ValidateSlotShape(const SlotShape& shape, const GpuModel& model) {
  switch (shape.kind) {
    case SlotKind::kWholeGpu:
      return absl::OkStatus();
    case SlotKind::kMig: {
      std::string names[] = {shape.mig_profile};
      return ResolveMigProfiles(model, names).status();
    }
    case SlotKind::kMps:
      if (shape.mps_thread_percentage < 1 || shape.mps_thread_percentage > 100) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mps thread percentage ", shape.mps_thread_percentage, " is outside 1..100"));
      }
      if (shape.memory_mib < 1 || shape.memory_mib > model.memory_mib) {
        return absl::InvalidArgumentError(absl::StrCat("mps memory limit ", shape.memory_mib,
                                                       " MiB is outside 1..", model.memory_mib,
                                                       " MiB (", model.name, ")"));
      }
      return absl::OkStatus();
    case SlotKind::kFraction:
      if (shape.compute_milli < 1 || shape.compute_milli > 1000) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fraction compute share ", shape.compute_milli, " is outside 1..1000 milli-GPU"));
      }
      if (shape.memory_mib < kMinFractionMemoryMib || shape.memory_mib > model.memory_mib) {
        return absl::InvalidArgumentError(
            absl::StrCat("fraction memory budget ", shape.memory_mib, " MiB is outside ",
                         kMinFractionMemoryMib, "..", model.memory_mib, " MiB (", model.name, ")"));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown slot kind");
}

GpuSlots::GpuSlots(const GpuModel& model) : model_(&model), mig_(model) {}

int64_t GpuSlots::FreeMemoryMib() const {
  if (slots_.empty()) return model_->memory_mib;
  if (serving_ == SlotKind::kWholeGpu) return 0;
  if (serving_ == SlotKind::kMig) {
    return static_cast<int64_t>(model_->memory_mib) / model_->mig_memory_slices *
           mig_.FreeMemorySlices();
  }
  int64_t used = 0;
  for (const auto& [id, c] : slots_) used += c.shape.memory_mib;
  return model_->memory_mib - used;
}

int GpuSlots::FreeComputeMilli() const {
  if (slots_.empty()) return 1000;
  switch (serving_) {
    case SlotKind::kWholeGpu: return 0;
    case SlotKind::kMig: return 1000 * mig_.FreeComputeSlices() / model_->mig_compute_slices;
    case SlotKind::kMps:
    case SlotKind::kFraction: {
      int used = 0;
      for (const auto& [id, c] : slots_) used += SlotComputeMilli(c.shape, model_);
      return std::max(0, 1000 - used);
    }
  }
  return 0;
}

absl::Status GpuSlots::CheckFits(const SlotShape& shape, int* mig_start) const {
  if (absl::Status s = ValidateSlotShape(shape, *model_); !s.ok()) return s;
  if (!slots_.empty() && shape.kind != serving_) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU serves ", SlotKindName(serving_), " slots; a ",
                     SlotKindName(shape.kind), " slot needs it empty"));
  }
  switch (shape.kind) {
    case SlotKind::kWholeGpu:
      if (!slots_.empty()) return absl::FailedPreconditionError("GPU is already leased whole");
      return absl::OkStatus();
    case SlotKind::kMig: {
      const MigProfile* profile = model_->FindMigProfile(shape.mig_profile);
      const MigProfile* wanted[] = {profile};
      absl::StatusOr<std::vector<MigPlacement>> plan = PlanMigLayout(mig_, wanted);
      if (!plan.ok()) return plan.status();
      *mig_start = plan->front().start;
      return absl::OkStatus();
    }
    case SlotKind::kMps:
      if (slot_count() >= kMaxMpsClientsPerGpu) {
        return absl::FailedPreconditionError(
            absl::StrCat("GPU already has ", kMaxMpsClientsPerGpu, " MPS clients (the maximum)"));
      }
      // Thread percentages are capped at 100 in total so each share is a guarantee, not an
      // oversubscribed hint (MPS itself would accept more).
      if (SlotComputeMilli(shape, model_) > FreeComputeMilli()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "MPS share needs ", shape.mps_thread_percentage, "% of the SMs, ",
            FreeComputeMilli() / 10, "% are unassigned"));
      }
      [[fallthrough]];
    case SlotKind::kFraction:
      if (shape.kind == SlotKind::kFraction && shape.compute_milli > FreeComputeMilli()) {
        return absl::FailedPreconditionError(absl::StrCat("fraction needs ", shape.compute_milli,
                                                          " milli-GPU of compute, ",
                                                          FreeComputeMilli(), " are free"));
      }
      if (shape.memory_mib > FreeMemoryMib()) {
        return absl::FailedPreconditionError(absl::StrCat("slot needs ", shape.memory_mib,
                                                          " MiB of GPU memory, ", FreeMemoryMib(),
                                                          " MiB are free"));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown slot kind");
}

absl::Status GpuSlots::CanCarve(const SlotShape& shape) const {
  int mig_start = -1;
  return CheckFits(shape, &mig_start);
}

absl::StatusOr<int> GpuSlots::Carve(const SlotShape& shape) {
  int mig_start = -1;
  if (absl::Status s = CheckFits(shape, &mig_start); !s.ok()) return s;
  if (shape.kind == SlotKind::kMig) {
    if (absl::Status s = mig_.Add(*model_->FindMigProfile(shape.mig_profile), mig_start); !s.ok()) {
      return s;
    }
  }
  serving_ = shape.kind;
  int id = next_id_++;
  slots_[id] = Carved{shape, mig_start};
  return id;
}

absl::Status GpuSlots::Release(int slot_id) {
  auto it = slots_.find(slot_id);
  if (it == slots_.end()) {
    return absl::NotFoundError(absl::StrCat("no slot ", slot_id, " on this GPU"));
  }
  if (it->second.shape.kind == SlotKind::kMig) {
    if (absl::Status s = mig_.Remove(it->second.mig_start); !s.ok()) return s;
  }
  slots_.erase(it);
  if (slots_.empty()) serving_ = SlotKind::kWholeGpu;
  return absl::OkStatus();
}

}  // namespace gpupool::pool
