#include "pool/scheduler/wait_reason.h"

namespace gpupool::pool {

absl::string_view WaitReasonName(WaitReason reason) {
  switch (reason) {
    case WaitReason::kNone: return "none";
    case WaitReason::kOverQuota: return "over-quota";
    case WaitReason::kNoBorrowableCapacity: return "no-borrowable-capacity";
    case WaitReason::kNoFreeCapacity: return "no-free-capacity";
    case WaitReason::kFragmented: return "fragmented";
    case WaitReason::kUnhealthyCapacity: return "unhealthy-capacity";
    case WaitReason::kGangReservation: return "gang-reservation";
    case WaitReason::kWaitingForPreemption: return "waiting-for-preemption";
    case WaitReason::kBehindHigherPriority: return "behind-higher-priority";
    case WaitReason::kNoHostCapacity: return "no-host-capacity";
    case WaitReason::kKeptForReserve: return "kept-for-reserve";
  }
  return "unknown";
}

}  // namespace gpupool::pool
