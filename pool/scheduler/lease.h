// File: pool/scheduler/lease.h
//
// A lease: GPU slots the scheduler granted to one request, until it is released, or revoked
// (with a grace period to checkpoint and stop) to make room for other work.
#ifndef GPUPOOL_POOL_SCHEDULER_LEASE_H_
#define GPUPOOL_POOL_SCHEDULER_LEASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "pool/inventory.h"
#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

struct Lease {
  std::string id;          // "<request id>#<n>": one lease per admitted request
  LeaseRequest request;
  std::vector<GpuRef> gpus;  // one per slot
  std::string group;
  int64_t milli = 0;       // quota charge
  bool borrowing = false;  // admitted beyond nominal quota: reclaimable by owners
  int64_t started_s = 0;
  int64_t last_checkpoint_s = 0;
  std::optional<int64_t> revoke_deadline_s;  // set once revoked
  std::string revoked_for;                   // the request it was revoked to make room for
  // How long the request waited, continuously guaranteed (within its team's nominal quota),
  // until this grant; absent when it was not guaranteed when granted.
  std::optional<int64_t> guaranteed_wait_s;
};

// kMove: defragmentation (move_planner.h); the lease is placed again on room free now.
enum class RevokeCause { kReclaim, kPriority, kDrain, kMove };
absl::string_view RevokeCauseName(RevokeCause cause);

// GPU-seconds of the lease's work since its last checkpoint: what revoking it now loses.
inline double WorkAtRisk(const Lease& lease, int64_t now_s) {
  return static_cast<double>(lease.milli) / 1000.0 * static_cast<double>(now_s - lease.last_checkpoint_s);
}

struct Revocation {
  std::string lease_id;
  RevokeCause cause;
  int64_t deadline_s = 0;       // stop by then: the class's grace period
  std::string for_request;      // the request it makes room for (empty for drains)
  double gpu_seconds_at_risk = 0;  // work since the lease's last checkpoint
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_LEASE_H_
