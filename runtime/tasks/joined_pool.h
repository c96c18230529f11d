// File: runtime/tasks/joined_pool.h
//
// What a job process has once it has joined a pool (runtime/bootstrap/pool_join.h decides how):
// the pool client it leases through, the GPUs its tasks run on, its place among the job's ranks,
// and what it hosts for the pool. The job runtime (runtime/tasks/job_runtime.h) is started with
// one; the bootstrap layer makes it, so the task layer never depends on how the pool was joined.
#ifndef GPUPOOL_RUNTIME_TASKS_JOINED_POOL_H_
#define GPUPOOL_RUNTIME_TASKS_JOINED_POOL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pool/devices/device_driver.h"
#include "absl/status/statusor.h"
#include "runtime/client/pool_client.h"
#include "runtime/group/job_group.h"

namespace gpupool::runtime {

class PoolService;  // runtime/service/pool_service.h
class NodeAgent;    // runtime/agent/node_agent.h
struct HeadHolder;  // runtime/bootstrap/pool_join.cc: rank 0's head, kept up for the other ranks

// What a process hosts for the pool under mpirun: rank 0's head, and each rank's node agent over
// its device driver. They must outlive the job's pool client; JobRuntime drops them after it, the
// agent first, then the driver it reads, then the head (the reverse of their order here, newest
// first). The head and the agent are shared_ptr because the task layer cannot see their types:
// each is made (and its deleter bound) where its type is complete, and dropped here without it.
// The head is also held by JoinedPool::before_stop, which waits on it; the last of the two to go
// stops it.
struct HostedParts {
  std::shared_ptr<HeadHolder> head;             // rank 0 only
  std::unique_ptr<pool::DeviceDriver> driver;   // the agent's: read by it until it stops
  std::shared_ptr<NodeAgent> agent;
};

// How a job joined to a shared head starts workers on nodes where it has no process
// (runtime/tasks/worker_pool.h): what to run there, where the workers reach this process, and
// how to describe a node's GPUs to its worker.
struct WorkerPlan {
  WorkerLaunch launch;            // executable, args, cwd, env (node and secret filled per start)
  std::string listen_host;        // this process's address as the pool's nodes see it
  std::function<absl::StatusOr<std::string>(const std::string& node)> describe_node;  // rpc::EncodeNodes form
};

struct JoinedPool {
  std::unique_ptr<PoolClient> pool;
  // `pool`, when it is the service living in this process (tests reach its driver through it).
  // Opaque to the task layer, which only hands it on: the service is a layer beside this one.
  PoolService* embedded = nullptr;
  std::vector<pool::DiscoveredNode> local_nodes;  // the GPUs this process's tasks run on
  std::string driver;                             // how they are reached: "nvidia" | "simulated"
  std::string notice;                             // the driver's fallback notice, if any
  std::string node_label;                         // this process's node in the pool ("" embedded, or none)
  bool pinned = true;                             // leases only on node_label (else: anywhere, via workers)
  std::optional<WorkerPlan> workers;              // set when tasks may run on other nodes
  int rank = 0;                                   // under mpirun
  int ranks = 1;
  std::unique_ptr<JobGroup> group;                // the ranks, connected for collectives
  // The key the job's ranks present to read each other's objects (fresh per mpirun job, made by
  // rank 0 and broadcast with the head's address); empty outside mpirun.
  std::string object_access_key;
  // What this process hosts for the pool (see HostedParts); empty outside an mpirun job that
  // hosts its own head.
  HostedParts hosted;
  // Run when the job's own work is done, before it stops serving its objects (rank 0: until the
  // other ranks have finished, so the objects and copies they may still fetch stay served).
  std::function<void()> before_stop;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_JOINED_POOL_H_
