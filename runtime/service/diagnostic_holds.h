// File: runtime/service/diagnostic_holds.h
//
// Diagnostics' leases (DESIGN §4b). While a node's agent tests one of its GPUs, the pool holds
// the GPU for the test as a lease of the reserved team `_pool`, workload class `diagnostics`:
// outside every quota, shown in `status` and charged in `usage` like any lease, and preemptible
// by anything, at once. The scheduler does not see these leases: it places work on the GPU as if
// it were free, and the first lease, reservation or room held there (or the GPU starting to
// drain) interrupts the test. The holder hears OnLost and the test's outcome is not applied: a
// test that shared its GPU with a task proves nothing either way. A test begins only on a GPU
// nothing is placed on: an idle healthy or degraded one, or a quarantined one (which nothing
// else can lease).
//
// The scheduler does not steer around a test: it may place work on a GPU under test while another
// GPU is idle, interrupting it needlessly; the agent tries again after its next period (a test
// takes seconds, every few minutes, so this is rare and cheap).
//
// Why not an ordinary request: a diagnostic must never wait, preempt or borrow, and it must give
// way to any request, guaranteed or not, without a grace period; none of which the scheduling
// cycle's rules say of a team. Holding it beside the scheduler keeps those rules as they are.
//
//   DiagnosticHolds holds;
//   const pool::Lease& lease = holds.Begin(gpu, group, pool_now);  // the caller checked the GPU
//   std::optional<pool::Lease> ended = holds.End(lease.id);       // nullopt: interrupted
//                                                                 // (work took its GPU)
// (The lease's listener is in the service's LeaseBook, like every lease's.)
//
// Not thread-safe: PoolService's lock guards it.
#ifndef GPUPOOL_RUNTIME_SERVICE_DIAGNOSTIC_HOLDS_H_
#define GPUPOOL_RUNTIME_SERVICE_DIAGNOSTIC_HOLDS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "pool/inventory.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::runtime {

// The reserved team diagnostics are charged to, and their workload class. No configured team
// may take the name (PoolConfig refuses names starting with '_').
inline constexpr char kPoolTeam[] = "_pool";
inline constexpr char kDiagnosticsWorkload[] = "diagnostics";
// Whether a journaled lease of `team` for request `request_id` is a diagnostic's.
bool IsDiagnosticLease(const std::string& team, const std::string& request_id);

class DiagnosticHolds {
 public:
  // `run` tells this run of the pool apart in lease ids (a head restarted from its journal must
  // not reuse the previous run's): the pool's start time, say.
  explicit DiagnosticHolds(uint64_t run = 0) : run_(run) {}

  // A lease on `gpu` (of quota group `group`) for a diagnostic, from `now_s` (pool seconds): team
  // kPoolTeam, one whole GPU.
  const pool::Lease& Begin(const pool::GpuRef& gpu, const std::string& group, int64_t now_s);
  // The held lease, ended; nullopt when `lease_id` is not held (interrupted meanwhile, or never).
  std::optional<pool::Lease> End(const std::string& lease_id);
  // Whether a diagnostic holds `gpu` now.
  bool Holds(const pool::GpuRef& gpu) const;
  const std::map<std::string, pool::Lease>& holds() const { return holds_; }

 private:
  std::map<std::string, pool::Lease> holds_;  // by lease id
  uint64_t run_;
  uint64_t next_ = 1;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_DIAGNOSTIC_HOLDS_H_
