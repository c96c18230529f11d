// File: runtime/bootstrap/pool_join.h
//
// How a job process finds its pool (DESIGN §3), decided once at Init:
//
//   - `pool_address` set (--gpupool-pool, GPUPOOL_ADDRESS): a head in another process (the
//     organisation's `gpupool head`). The job connects as its team with its token and asks the
//     head which GPUs its node has (`node_name`, default this host's name). Its tasks run wherever
//     the pool grants leases: on its own node in this process, elsewhere in workers the nodes'
//     agents start for it (runtime/tasks/worker_pool.h); `local_only` pins them to its node. Launched by mpirun, every rank does so for
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
// Under mpirun, tasks run in the rank that submitted them: each rank's leases are pinned to its
// own node (`node_label`), SPMD as before.
#ifndef GPUPOOL_RUNTIME_BOOTSTRAP_POOL_JOIN_H_
#define GPUPOOL_RUNTIME_BOOTSTRAP_POOL_JOIN_H_

#include "absl/status/statusor.h"
#include "gpupool/runtime.h"
#include "runtime/tasks/joined_pool.h"

namespace gpupool::runtime {


absl::StatusOr<JoinedPool> JoinPool(const RuntimeOptions& options);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_BOOTSTRAP_POOL_JOIN_H_
