// File: pool/mig_planner.h
//
// Chooses where MIG GPU instances go on one GPU. Administrators see it as `gpupool mig plan`; the
// pool uses the same function when it carves slices for leases.
//
// The rule, when several start slots would work for an instance: take the one that keeps the
// largest further profile placeable (largest = most memory slices, then most compute slices), and
// among equals the lowest start slot. Profiles are placed largest first, and the search backtracks
// when a greedy choice would leave a later profile of the set without room, so a set that fits in
// any arrangement is always found.
//
//   MigLayout empty(*FindGpuModel("H100-80GB"));
//   auto plan = PlanMigLayout(empty, {"1g.10gb", "3g.40gb"});
//   // 3g.40gb goes to 4 (keeps 4g.40gb placeable at 0), then 1g.10gb to 0 ... in request order.
//
// Errors (InvalidArgument for names, FailedPrecondition for layouts that cannot fit) name the
// conflict: the profile, the limit or the instances in the way.
#ifndef GPUPOOL_POOL_MIG_PLANNER_H_
#define GPUPOOL_POOL_MIG_PLANNER_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/mig_layout.h"

namespace gpupool::pool {

// Resolves profile names against `model`, with an error that lists the valid ones.
absl::StatusOr<std::vector<const MigProfile*>> ResolveMigProfiles(
    const GpuModel& model, std::span<const std::string> profile_names);

// Plans `wanted` on top of the instances already in `existing` (which is not modified). Returns
// one placement per wanted profile, in the order given.
absl::StatusOr<std::vector<MigPlacement>> PlanMigLayout(
    const MigLayout& existing, std::span<const MigProfile* const> wanted);

// Convenience: names instead of profiles.
absl::StatusOr<std::vector<MigPlacement>> PlanMigLayout(
    const MigLayout& existing, std::span<const std::string> wanted_names);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_MIG_PLANNER_H_
