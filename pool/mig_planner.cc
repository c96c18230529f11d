#include "absl/strings/string_view.h"
#include "pool/mig_planner.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::pool {
namespace {

// Largest-first order, ties keep request order.
std::vector<size_t> PlacementOrder(std::span<const MigProfile* const> wanted) {
  std::vector<size_t> order(wanted.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return wanted[a]->LargerThan(*wanted[b]); });
  return order;
}

// Refusals that need no search: limits the whole set breaks whatever the arrangement.
absl::Status CheckSetLimits(const MigLayout& existing, std::span<const MigProfile* const> wanted) {
  const GpuModel& model = existing.model();
  absl::flat_hash_map<const MigProfile*, int> counts;
  for (const MigPlacement& p : existing.placements()) ++counts[p.profile];
  int memory = 0, compute = 0, media = 0;
  for (const MigPlacement& p : existing.placements()) media += p.profile->media_extensions;
  for (const MigProfile* p : wanted) {
    memory += p->memory_slices;
    compute += p->compute_slices;
    media += p->media_extensions;
    if (++counts[p] > p->max_instances) {
      return absl::FailedPreconditionError(absl::StrCat(
          "at most ", p->max_instances, " ", p->name, " instance",
          p->max_instances == 1 ? "" : "s", " fit on one ", model.name, ", the layout asks for ",
          counts[p]));
    }
  }
  if (media > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "only one instance per ", model.name, " can own the media extensions (+me), the layout has ",
        media));
  }
  std::string already = existing.placements().empty()
                            ? std::string()
                            : absl::StrCat(" (existing instances: ", existing.ToString(), ")");
  if (memory > existing.FreeMemorySlices()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the profiles need ", memory, " memory slices but ", model.name, " has ",
                     existing.FreeMemorySlices(), " free of ", model.mig_memory_slices, already));
  }
  if (compute > existing.FreeComputeSlices()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the profiles need ", compute, " compute slices but ", model.name, " has ",
                     existing.FreeComputeSlices(), " free of ", model.mig_compute_slices, already));
  }
  return absl::OkStatus();
}

// Depth-first search over start slots, best-scored first. Failed (depth, occupied-slices) states
// are remembered: what is still placeable depends only on which slices are taken, because the
// profiles placed so far (hence counts, compute and media use) are fixed by the depth.
class Search {
 public:
  Search(std::span<const MigProfile* const> wanted, std::vector<size_t> order)
      : wanted_(wanted), order_(std::move(order)), chosen_(wanted.size()) {}

  bool Run(MigLayout& layout, size_t depth) {
    if (depth == order_.size()) return true;
    uint32_t occupied = OccupiedMask(layout);
    if (failed_.contains({depth, occupied})) return false;
    const MigProfile& profile = *wanted_[order_[depth]];
    for (int start : RankedStarts(layout, profile)) {
      absl::Status added = layout.Add(profile, start);
      if (!added.ok()) continue;  // RankedStarts only offers starts that CanAdd accepted
      chosen_[order_[depth]] = {&profile, start};
      if (Run(layout, depth + 1)) return true;
      (void)layout.Remove(start);
    }
    if (depth >= deepest_failure_depth_) {
      deepest_failure_depth_ = depth;
      deepest_failure_ = absl::StrCat("no free start for ", profile.name, " (allowed starts ",
                                      absl::StrJoin(profile.allowed_starts, ","), ") once ",
                                      layout.ToString(), " are placed");
    }
    failed_.insert({depth, occupied});
    return false;
  }

  const std::vector<MigPlacement>& chosen() const { return chosen_; }
  const std::string& deepest_failure() const { return deepest_failure_; }

 private:
  static uint32_t OccupiedMask(const MigLayout& layout) {
    uint32_t mask = 0;
    for (const MigPlacement& p : layout.placements()) {
      for (int s = p.start; s < p.end(); ++s) mask |= 1u << s;
    }
    return mask;
  }

  // Free starts ordered by the planner's rule: the largest profile still placeable afterwards,
  // then the lowest start.
  static std::vector<int> RankedStarts(MigLayout& layout, const MigProfile& profile) {
    std::vector<std::pair<const MigProfile*, int>> scored;
    for (int start : layout.FreeStarts(profile)) {
      if (!layout.Add(profile, start).ok()) continue;
      scored.emplace_back(layout.LargestPlaceable(), start);
      (void)layout.Remove(start);
    }
    std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
      const MigProfile* pa = a.first;
      const MigProfile* pb = b.first;
      if (pa == nullptr || pb == nullptr) return pa != nullptr && pb == nullptr;
      return pa->LargerThan(*pb);
    });
    std::vector<int> starts;
    for (const auto& [unused, start] : scored) starts.push_back(start);
    return starts;
  }

  std::span<const MigProfile* const> wanted_;
  std::vector<size_t> order_;
  std::vector<MigPlacement> chosen_;
  std::set<std::pair<size_t, uint32_t>> failed_;
  size_t deepest_failure_depth_ = 0;
  std::string deepest_failure_;
};

}  // namespace

absl::StatusOr<std::vector<const MigProfile*>> ResolveMigProfiles(
    const GpuModel& model, std::span<const std::string> profile_names) {
  if (!model.SupportsMig()) {
    return absl::InvalidArgumentError(absl::StrCat(model.name, " does not support MIG"));
  }
  std::vector<const MigProfile*> out;
  for (const std::string& name : profile_names) {
    const MigProfile* p = model.FindMigProfile(name);
    if (p == nullptr) {
      std::vector<absl::string_view> known;
      for (const MigProfile& q : model.mig_profiles) known.push_back(q.name);
      return absl::InvalidArgumentError(absl::StrCat("unknown MIG profile '", name, "' for ",
                                                     model.name, " (known: ",
                                                     absl::StrJoin(known, ", "), ")"));
    }
    out.push_back(p);
  }
  return out;
}

absl::StatusOr<std::vector<MigPlacement>> PlanMigLayout(
    const MigLayout& existing, std::span<const MigProfile* const> wanted) {
  if (!existing.model().SupportsMig()) {
    return absl::InvalidArgumentError(absl::StrCat(existing.model().name, " does not support MIG"));
  }
  if (absl::Status s = CheckSetLimits(existing, wanted); !s.ok()) return s;
  MigLayout scratch = existing;
  Search search(wanted, PlacementOrder(wanted));
  if (!search.Run(scratch, 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the layout does not fit on ", existing.model().name, ": ",
                     search.deepest_failure()));
  }
  return search.chosen();
}

absl::StatusOr<std::vector<MigPlacement>> PlanMigLayout(const MigLayout& existing,
                                                        std::span<const std::string> wanted_names) {
  absl::StatusOr<std::vector<const MigProfile*>> profiles =
      ResolveMigProfiles(existing.model(), wanted_names);
  if (!profiles.ok()) return profiles.status();
  return PlanMigLayout(existing, *profiles);
}

}  // namespace gpupool::pool
