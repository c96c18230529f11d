// File: runtime/job/pool_join.h
//
// How a job process finds its pool (DESIGN §3), decided once at Init:
//
//   - `pool_address` set (--gpupool-pool, GPUPOOL_ADDRESS): a head in another process (the
//     organisation's `gpupool head`). The job connects as its team with its token, asks the head
//     which GPUs its node has (`node_name`, default this host's name), and runs its tasks there;
//     the node's `gpupool agent` keeps the node up. Launched by mpirun, every rank does so for
//     its own node, and MPI then connects the ranks for collectives and objects (rank 0 makes
//     the job's object key), so the job is one job of several ranks, not several of one.
//   - launched by mpirun: MPI bootstraps the job, then is never called again. Every rank
//     discovers its node (simulated GPUs: one node per rank, "rank-<r>"), the ranks allgather
//     them, rank 0 starts the job's head over all of them (on loopback unless `head_listen` says
//     otherwise) and broadcasts its address and fresh tokens; then every rank registers as the
//     agent of its own node and leases from the head like any remote job (and presents the job's
//     fresh object key to read the other ranks' objects). Rank 0's head lives
//     until the other ranks have gone.
//   - otherwise: the pool is embedded in this process (one process may play several simulated
//     nodes), and RPC becomes direct calls.
//
// Tasks always run in the process that submitted them, so a remote job's leases are pinned to
// its own node (`node_label`).
#ifndef GPUPOOL_RUNTIME_JOB_POOL_JOIN_H_
#define GPUPOOL_RUNTIME_JOB_POOL_JOIN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpupool/runtime.h"
#include "pool/devices/device_driver.h"
#include "runtime/head/embedded_pool.h"
#include "runtime/head/pool_client.h"
#include "runtime/job/job_group.h"

namespace gpupool::runtime {

struct JoinedPool {
  std::unique_ptr<PoolClient> pool;
  EmbeddedPool* embedded = nullptr;               // `pool`, when it lives in this process
  std::vector<pool::DiscoveredNode> local_nodes;  // the GPUs this process's tasks run on
  std::string driver;                             // how they are reached: "nvidia" | "simulated"
  std::string notice;                             // the driver's fallback notice, if any
  std::string node_label;                         // non-empty: leases are pinned to this node
  int rank = 0;                                   // under mpirun
  int ranks = 1;
  std::unique_ptr<JobGroup> group;                // the ranks, connected for collectives
  // The key the job's ranks present to read each other's objects (fresh per mpirun job, made by
  // rank 0 and broadcast with the head's address); empty outside mpirun.
  std::string object_access_key;
  // What this process hosts for the pool (rank 0's head, a rank's agent and its driver). They
  // must outlive `pool` and are destroyed newest first after it.
  std::vector<std::shared_ptr<void>> companions;
  // Run when the job's own work is done, before it stops serving its objects (rank 0: until the
  // other ranks have finished, so the objects and copies they may still fetch stay served).
  std::function<void()> before_stop;
};

absl::StatusOr<JoinedPool> JoinPool(const RuntimeOptions& options);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_JOB_POOL_JOIN_H_
