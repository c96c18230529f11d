// File: pool/scheduler/preemption_planner.h
//
// Which running leases to revoke so that a blocked request fits: the post-filter stage's planner
// for reclaim (a guaranteed request takes back capacity other teams borrow) and priority
// preemption (strictly lower-priority leases of the request's own team). The scheduler gathers
// the candidates (victim_census.h) and says, for any set of them, whether the request would fit
// once they are gone; the planner chooses.
//
//   std::optional<std::vector<size_t>> victims = PlanPreemption(candidates, own_quota_to_free, fits);
//
// Choice: little work lost and few victims, by a heuristic. Candidates are taken cheapest first
// (milli-GPU-seconds since their last checkpoint; among equals the one holding more GPUs, which
// frees more per victim; then by lease id), those marked `last` after all others, until the
// request fits; the shortest such prefix is found by bisection (fitting is monotone in the
// prefix). Then any victim that turns out unnecessary is dropped again, from the end of that
// order (`last` ones first, then the most expensive).
//
// When the team's own quota is what blocks the request (it would be beyond nominal), the team's
// own victims must also free at least `own_quota_to_free` milli-GPUs of quota.
//
// A pure function, like PlanMoves (move_planner.h); internal to pool/scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_PREEMPTION_PLANNER_H_
#define GPUPOOL_POOL_SCHEDULER_PREEMPTION_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace gpupool::pool {

struct PreemptionCandidate {
  double cost = 0;         // work revoking it loses now: milli-GPUs x seconds since its checkpoint
  size_t gpus = 0;         // how many GPUs it holds
  std::string_view id;     // its lease id: the last tie-break, so plans are deterministic
  bool last = false;       // taken only after every other candidate
  int64_t own_milli = 0;   // the requester's team's quota it frees (0 for another team's lease)
};

// `fits(freed)`: whether the request fits once the candidates `freed` (indexes into
// `candidates`) are given back; must be monotone (freeing more never makes it unfit). Returns the
// victims, indexes into `candidates`, cheapest first; nullopt when even revoking every candidate
// is not enough (or there is none).
std::optional<std::vector<size_t>> PlanPreemption(
    const std::vector<PreemptionCandidate>& candidates, int64_t own_quota_to_free,
    const std::function<bool(const std::vector<size_t>& freed)>& fits);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_PREEMPTION_PLANNER_H_
