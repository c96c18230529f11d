// File: pool/scheduler/victim_census.h
//
// How many running leases preemption could choose from, by quota group, team, borrowing and
// priority value, so that the scheduler answers "is there any victim at all?" without walking
// every lease. Most blocked requests have none (a full pool of guaranteed work), and the answer
// is asked once per blocked request per cycle.
//
//   census.Add(lease, ClassOf(lease.request));     // at grant
//   census.Remove(lease, ClassOf(lease.request));  // when revoked, or released unrevoked
//   if (!census.AnyCandidate(group, team, guaranteed, value)) ...  // nothing to preempt
//
// Counts only leases of preemptible classes that are not revoked yet: exactly the leases the
// scheduler's preemption planner considers. Thread-compatible; owned by the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_VICTIM_CENSUS_H_
#define GPUPOOL_POOL_SCHEDULER_VICTIM_CENSUS_H_

#include <map>
#include <string>
#include <utility>

#include "pool/config/scheduling_config.h"

namespace gpupool::pool {

struct Lease;

class VictimCensus {
 public:
  // Both ignore leases of non-preemptible classes. Remove must follow an Add of the same lease.
  void Add(const Lease& lease, const PriorityClass& lease_class);
  void Remove(const Lease& lease, const PriorityClass& lease_class);

  // Whether a request of `team` at priority `value` has a candidate victim in `group`: when
  // `guaranteed`, a borrowing lease of another team; in any case, a lease of its own team with a
  // strictly lower priority value.
  bool AnyCandidate(const std::string& group, const std::string& team, bool guaranteed,
                    int value) const;

 private:
  // group -> team -> (borrowing, priority value) -> live candidate leases (never 0: erased)
  std::map<std::string, std::map<std::string, std::map<std::pair<bool, int>, int>>> count_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_VICTIM_CENSUS_H_
