// File: pool/scheduler/spare_reserve.h
//
// Spare capacity for urgent work (the configuration's `reserve:`, scheduling_config.h): per quota
// group, a number of whole GPUs kept entirely free for requests of priority classes at or above a
// named one. This file holds the rules and counts the spare GPUs; the Scheduler applies them
// (scheduler_reserve.cc). The semantics, chosen where the issue is silent:
//
//   - A GPU is spare when it is schedulable, untouched (no lease, no fraction, no moved lease's
//     held room on it) and held for no request by a preemption (SpareGpu). GPUs under a gang's
//     head-of-line reservation still count: that reservation only predicts, and a gang below the
//     class may not take spare GPUs when it is placed either.
//   - A request of a class below the threshold ("restricted") may be placed in the group only
//     where that leaves at least `gpus` spare GPUs, whether it is within its team's nominal quota
//     or borrowing: every nominal quota fits in the capacity minus the reserve (the configuration
//     is refused otherwise), so guaranteed work never needs the reserve, and borrowers never
//     take it. A placement that would take spare GPUs is retried on the other GPUs (fractions
//     then go on partly used GPUs); it waits with WaitReason::kKeptForReserve when that fails
//     too.
//   - A request at or above the threshold may take spare GPUs at once, as far as its quota admits
//     it (within nominal, or borrowing where its class may borrow: the reserve is outside every
//     nominal quota, so urgent work on it is beyond quota by construction; refusing it to
//     borrowers would open the reserve only to a team whose own room is lent out, rarely the
//     case in the busy pool that needs a reserve). An owner reclaiming borrowed capacity takes
//     such leases last (TryPreempt).
//   - Refill: at the end of every cycle, a group with fewer spare GPUs than its reserve, counting
//     the GPUs revoked leases will leave, reclaims borrowed leases of classes below the threshold
//     (never work within nominal quota, never the urgent work itself): the lowest priority first,
//     then the least work at risk, with each class's grace period, as few as make the reserve
//     whole again (or, when borrowed work alone cannot, as many as add spare GPUs). Revocations
//     say RevokeCause::kReclaim and for_request "reserve:<group>". While it refills, restricted
//     requests cannot take the GPUs it frees: they are spare GPUs below the reserve.
//   - A restricted request that could never be placed beside the reserve (more GPUs than the
//     group holds minus the reserve) is refused at submission.
//
// Thread-compatible; owned by the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_SPARE_RESERVE_H_
#define GPUPOOL_POOL_SCHEDULER_SPARE_RESERVE_H_

#include <map>
#include <string>
#include <vector>

#include "pool/config/scheduling_config.h"
#include "pool/scheduler/capacity.h"

namespace gpupool::pool {

struct ReserveRule {
  std::string group;
  int gpus = 0;
  std::string for_class;   // the configured class name
  int min_priority = 0;    // its value: classes with at least this value may use the reserve
  std::vector<int> group_gpus;  // GPU positions of the group, ascending
};

// What `gpupool status` and `queue` show of one reserve.
struct ReserveStatus {
  std::string group;
  int gpus = 0;              // configured
  std::string for_class;
  int spare_gpus = 0;        // entirely free GPUs of the group now (may exceed `gpus`)
  int group_gpus = 0;        // GPUs of the group in the pool
  int refilling_leases = 0;  // borrowed leases revoked to refill it, still stopping
};

class SpareReserves {
 public:
  // Reserves of groups this pool lacks are kept (with no GPUs) and never bind.
  SpareReserves(const PoolTopology& topology, const SchedulingConfig& config);

  bool empty() const { return rules_.empty(); }
  const std::vector<ReserveRule>& rules() const { return rules_; }
  // The group's rule, or nullptr; a rule of 0 GPUs binds nothing and is not returned.
  const ReserveRule* For(const std::string& group) const;

  // Re-reads these GPUs from the live state (the Scheduler calls it wherever it refreshes its
  // indexes).
  void Refresh(const CapacityState& state, const std::vector<int>& gpus);
  // Spare GPUs of the rule's group in the live state as last refreshed.
  int SpareNow(const ReserveRule& rule) const;
  // Spare GPUs of the rule's group in any state (a what-if copy): O(group).
  static int CountSpare(const CapacityState& state, const ReserveRule& rule);

 private:
  std::vector<ReserveRule> rules_;
  std::map<std::string, size_t> by_group_;
  std::vector<int> rule_of_gpu_;  // per GPU position: index into rules_, or -1
  std::vector<char> spare_;       // per GPU position, as last refreshed
  std::vector<int> spare_count_;  // per rule
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_SPARE_RESERVE_H_
