// File: pool/scheduler/victim_census.h
//
// The running leases preemption may choose from, indexed by quota group, team, borrowing and
// priority value, so that the scheduler finds a blocked request's candidate victims without
// walking every lease, and answers "is there any victim at all?" at once. Most blocked requests
// have none (a full pool of guaranteed work), and the question is asked at least once per blocked
// request and quota group per cycle; in a profile at about 30,000 GPUs, walking every lease in
// TryPreempt took about a quarter of the scheduler's time.
//
//   census.Add(lease, ClassOf(lease.request));     // at grant: `lease` as the scheduler holds it
//   census.Remove(lease, ClassOf(lease.request));  // when revoked, or released unrevoked
//   if (!census.AnyCandidate(group, team, guaranteed, value)) ...  // nothing to preempt
//   census.ForEachCandidate(group, team, guaranteed, value, [](const Lease&, RevokeCause) {...});
//
// Holds only leases of preemptible classes that are not revoked yet: exactly the leases the
// scheduler's preemption planner considers. Keeps pointers: a lease must stay where it was Added
// until it is Removed (the scheduler's std::map of leases never moves its elements).
// Thread-compatible; owned by the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_VICTIM_CENSUS_H_
#define GPUPOOL_POOL_SCHEDULER_VICTIM_CENSUS_H_

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "pool/config/scheduling_config.h"
#include "pool/scheduler/lease.h"

namespace gpupool::pool {

class VictimCensus {
 public:
  // Both ignore leases of non-preemptible classes. Remove must follow an Add of the same lease.
  void Add(const Lease& lease, const PriorityClass& lease_class);
  void Remove(const Lease& lease, const PriorityClass& lease_class);

  // Whether a request of `team` at priority `value` has a candidate victim in `group`: when
  // `guaranteed`, a borrowing lease of another team (reclaim); in any case, a lease of its own
  // team with a strictly lower priority value (priority).
  bool AnyCandidate(const std::string& group, const std::string& team, bool guaranteed,
                    int value) const;
  // Calls `f(lease, cause)` for each of those candidates, with kReclaim or kPriority. The order
  // is the index's (team, borrowing, value, lease id): callers that need another sort.
  template <typename F>
  void ForEachCandidate(const std::string& group, const std::string& team, bool guaranteed,
                        int value, F&& f) const;

 private:
  // Why a lease of `their_team`, borrowing or not, at `their_value` would be revoked for such a
  // request: kPriority (own team, lower value), kReclaim (another team's borrowed capacity, for a
  // guaranteed request), or nullopt (not a candidate).
  static std::optional<RevokeCause> CauseFor(const std::string& their_team, bool borrowing, int their_value,
                                             const std::string& team, bool guaranteed, int value) {
    if (their_team == team) return their_value < value ? std::optional(RevokeCause::kPriority) : std::nullopt;
    return guaranteed && borrowing ? std::optional(RevokeCause::kReclaim) : std::nullopt;
  }

  // lease id -> the lease, as the scheduler holds it
  using Leases = std::map<std::string, const Lease*>;
  // group -> team -> (borrowing, priority value) -> live candidate leases (never empty: erased)
  std::map<std::string, std::map<std::string, std::map<std::pair<bool, int>, Leases>>> index_;
};

template <typename F>
void VictimCensus::ForEachCandidate(const std::string& group, const std::string& team,
                                    bool guaranteed, int value, F&& f) const {
  auto by_team = index_.find(group);
  if (by_team == index_.end()) return;
  for (const auto& [their_team, by_kind] : by_team->second) {
    for (const auto& [kind, leases] : by_kind) {
      const std::optional<RevokeCause> cause = CauseFor(their_team, kind.first, kind.second, team, guaranteed, value);
      if (!cause) continue;
      for (const auto& [id, lease] : leases) f(*lease, *cause);
    }
  }
}

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_VICTIM_CENSUS_H_
