// File: pool/scheduler/wait_reason.h
//
// Why a pending request is not running, as Slurm's Reason column and Kueue's conditions say it.
// Each reason is a scheduling outcome, not an error, and tells the user what would change it:
//   kOverQuota            the team's nominal + borrowing limit would be exceeded
//   kNoBorrowableCapacity within its limit, but nothing idle to borrow from other teams
//   kNoFreeCapacity       too little free room on the allowed GPUs, even in total
//   kFragmented           enough free capacity in total, but not where the topology needs it
//   kUnhealthyCapacity    the room exists only on GPUs that are draining or lost
//   kGangReservation      a larger request ahead holds a reservation on the GPUs it needs
//   kWaitingForPreemption victims were revoked for it (reclaimed, preempted by priority or
//                         moved to defragment); their grace period is running
//   kBehindHigherPriority capacity is reserved for a request ordered ahead of it
//   kNoHostCapacity       GPUs with room exist, but their nodes lack the host CPU or memory it
//                         asks for beside them
//   kKeptForReserve       it would fit, but only on GPUs kept free for higher priority classes
//                         (the configuration's `reserve:`; spare_reserve.h)
#ifndef GPUPOOL_POOL_SCHEDULER_WAIT_REASON_H_
#define GPUPOOL_POOL_SCHEDULER_WAIT_REASON_H_

#include "absl/strings/string_view.h"

namespace gpupool::pool {

enum class WaitReason {
  kNone,
  kOverQuota,
  kNoBorrowableCapacity,
  kNoFreeCapacity,
  kFragmented,
  kUnhealthyCapacity,
  kGangReservation,
  kWaitingForPreemption,
  kBehindHigherPriority,
  kNoHostCapacity,
  kKeptForReserve,
};

// Short names for tables and JSON: "over-quota", "no-borrowable-capacity", ...
absl::string_view WaitReasonName(WaitReason reason);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_WAIT_REASON_H_
