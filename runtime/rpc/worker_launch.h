// File: runtime/rpc/worker_launch.h
//
// What a job asks a node's agent for when it needs a process on that node: the description of a
// worker process (the job's PoolClient::StartWorker sends it; the head forwards it to the node's
// agent, which starts it: runtime/agent/worker_launcher.h). A plain struct, in the lowest layer
// that the job's client, the head and the agent all see; its wire form is
// runtime/rpc/worker_launch_codec.h.
#ifndef GPUPOOL_RUNTIME_RPC_WORKER_LAUNCH_H_
#define GPUPOOL_RUNTIME_RPC_WORKER_LAUNCH_H_

#include <map>
#include <string>
#include <vector>

namespace gpupool::runtime {

// A worker process of a job, to be started by a node's agent on the head's word (a job runs its
// tasks wherever it holds leases: runtime/tasks/worker_pool.h). The agent starts `executable`
// with `args`, in `cwd` (or "/" when that is missing there), with `env` added to its own
// environment, and hands it `secret` through an inherited pipe: it appends
// "--gpupool-worker-secret-fd=N" to the arguments and writes the secret into that pipe, so the
// secret never shows in /proc/PID/cmdline or /proc/PID/environ. The worker dies with the agent
// (PR_SET_PDEATHSIG) and leads a process group of its own.
struct WorkerLaunch {
  std::string node;                        // the node whose agent starts it
  std::string job;                         // names the job's workers (StopJob on the agent kills them)
  std::string executable;                  // absolute path; must exist on that node
  std::vector<std::string> args;           // argv[1..]
  std::string cwd;
  std::map<std::string, std::string> env;  // added to (or replacing in) the agent's environment
  std::string secret;                      // the job's worker key
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_RPC_WORKER_LAUNCH_H_
