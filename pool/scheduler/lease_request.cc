#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

absl::string_view GangTopologyName(GangTopology t) {
  switch (t) {
    case GangTopology::kAny: return "any";
    case GangTopology::kSameNode: return "same-node";
    case GangTopology::kSameNvLinkIsland: return "same-nvlink-island";
  }
  return "unknown";
}

int64_t SlotMilli(const SlotShape& slot, const GpuModel& model) {
  switch (slot.kind) {
    case SlotKind::kWholeGpu: return 1000;
    case SlotKind::kFraction: return slot.compute_milli;
    case SlotKind::kMps: return slot.mps_thread_percentage * 10;
    case SlotKind::kMig: {
      const MigProfile* p = model.FindMigProfile(slot.mig_profile);
      return p == nullptr ? 0 : 1000 * p->compute_slices / model.mig_compute_slices;
    }
  }
  return 0;
}

}  // namespace gpupool::pool
