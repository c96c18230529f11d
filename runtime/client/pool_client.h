// File: runtime/client/pool_client.h
//
// What a job runtime needs of a pool service, wherever the service lives: in this process
// (PoolService, DESIGN §3 "embedded") or in another one over Cap'n Proto RPC (RemotePool: an
// mpirun job's rank 0, or the organisation's `gpupool head`). The job asks for leases, is told
// through a LeaseListener when they are granted, revoked or lost, and gives them back.
//
// Thread-safe in both implementations. Listeners are called from a thread of the pool client,
// never with its locks held, and may call back into it.
#ifndef GPUPOOL_RUNTIME_CLIENT_POOL_CLIENT_H_
#define GPUPOOL_RUNTIME_CLIENT_POOL_CLIENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/config/pool_config.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/rpc/worker_launch.h"

namespace gpupool::runtime {

class LeaseListener {
 public:
  virtual ~LeaseListener() = default;
  virtual void OnGranted(const pool::Lease& lease) = 0;
  // Stop at a safe point before `deadline_s` (pool time), then Release.
  virtual void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) = 0;
  // The lease is gone (its GPU or node failed, the revocation's deadline passed, or the pool
  // service became unreachable): stop using it now. The pool has already taken it back; do not
  // Release it.
  virtual void OnLost(const std::string& lease_id, const std::string& why) = 0;
  // A request will never be granted: the service refused a request made with Submit (the same
  // errors Request returns), or it became unreachable for good before granting one that it
  // had accepted.
  virtual void OnRequestFailed(const std::string& request_id, const absl::Status& why) {
    (void)request_id;
    (void)why;
  }
};

struct LedgerTeam {
  double leased_gpu_s = 0;
  double borrowed_gpu_s = 0;
  uint64_t leases = 0;
};

// Which snapshot a task committed (runtime/tasks/checkpoint_service.h), for the pool's index.
struct CheckpointNote {
  std::string task_key;
  uint64_t version = 0;
  int64_t step = 0;
  std::string path;  // the snapshot file, as the job sees it
};

// WorkerLaunch (what StartWorker asks for) is in runtime/rpc/worker_launch.h, so that the agent,
// which starts the worker and sees no client code, reads the same struct.

class PoolClient {
 public:
  virtual ~PoolClient() = default;

  // Queues a lease request; the listener hears of the grant. Errors: the request is malformed or
  // can never be admitted (nothing is queued then), or the service is unreachable.
  virtual absl::Status Request(pool::LeaseRequest request, LeaseListener* listener) = 0;
  // The same request without waiting for the service to accept it: a refusal reaches the
  // listener's OnRequestFailed instead of the caller (from this call itself when the client can
  // tell at once). What a job runtime uses: a remote service's answer costs a round trip that
  // the grant, which follows it on the same connection, makes redundant.
  virtual void Submit(pool::LeaseRequest request, LeaseListener* listener) {
    std::string id = request.id;
    absl::Status st = Request(std::move(request), listener);
    if (!st.ok()) listener->OnRequestFailed(id, st);
  }
  // Withdraws a request that was not granted yet; NotFound when it is not pending.
  virtual absl::Status Withdraw(const std::string& request_id) = 0;
  // Gives a lease back; NotFound for an unknown (or already lost) lease.
  virtual absl::Status Release(const std::string& lease_id) = 0;
  // As Release, saying how long tasks kept the lease busy (pool seconds x GPUs), which a pool with
  // a ledger records beside the lease's hold (usage's busy time and efficiency). The default, for
  // pools without a ledger, forgets it.
  virtual absl::Status ReleaseUsed(const std::string& lease_id, double busy_gpu_s) {
    (void)busy_gpu_s;
    return Release(lease_id);
  }
  // A task on `lease_id` committed a snapshot: the work at risk on the lease starts again from
  // now, so the scheduler prefers it as a victim over leases that would lose more. A remote pool
  // also records the snapshot in its checkpoint index. Nothing to wait for; a lease gone
  // meanwhile is ignored.
  virtual void Checkpointed(const std::string& lease_id, const CheckpointNote& note) = 0;
  // The task whose snapshots were noted under `task_key` is done (they are deleted).
  virtual void ForgetCheckpoints(const std::string& task_key) { (void)task_key; }

  // Asks the agent of `launch.node` to start a worker of this job (see WorkerLaunch); returns its
  // pid. Errors name the node and the reason: no agent there, the executable is missing, the
  // agent refuses to run it as root, the head does not know this job. Only a pool shared through
  // a head has agents: the default is kUnimplemented.
  virtual absl::StatusOr<int> StartWorker(const WorkerLaunch& launch) {
    (void)launch;
    return absl::UnimplementedError("this pool has no node agents to start workers");
  }

  // Pool seconds since the service started (its clock may run faster than real time).
  virtual double Now() const = 0;
  // The service's configuration: teams, quotas, priority classes (grace periods, forced
  // checkpoint intervals).
  virtual const pool::PoolConfig& config() const = 0;
  virtual double capacity_gpus() const = 0;
  // Lease GPU-seconds per team so far as this client can see them: the whole pool's for an
  // embedded pool, this job's own for a remote one.
  virtual std::map<std::string, LedgerTeam> Ledger() const = 0;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_POOL_CLIENT_H_
