// File: runtime/bootstrap/worker_join.h
//
// How a worker process joins its driver (the driver's side: runtime/tasks/worker_pool.h). A
// node's agent starts the worker as the job's program with --gpupool-worker and these flags:
//
//   --gpupool-worker-driver=HOST:PORT  where the driver listens for its workers
//   --gpupool-worker-job=JOB           the job's id
//   --gpupool-worker-node=NODE         the node it serves
//   --gpupool-worker-secret-fd=N       a pipe holding the job's secret (the agent writes it there,
//                                      so it is in neither the command line nor the environment)
//
// The worker reads the secret, connects, says Hello, checks the driver's proof that it holds the
// secret, proves it holds it too (the secret never crosses the connection: runtime/tasks/job_proof.h)
// and takes the Welcome: the node's GPUs and the runtime settings the driver runs with. Its stdout and stderr are then forwarded to
// the driver line by line.
#ifndef GPUPOOL_RUNTIME_BOOTSTRAP_WORKER_JOIN_H_
#define GPUPOOL_RUNTIME_BOOTSTRAP_WORKER_JOIN_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpupool/runtime.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/tasks/joined_pool.h"
#include "runtime/tasks/own_process.h"

namespace gpupool::runtime {

// Whether this process was started as a worker: "--gpupool-worker" among the arguments (or, with
// none given, on /proc/self/cmdline).
// (OwnCommandLine: runtime/tasks/own_process.h.)
bool IsWorkerProcess(const std::vector<std::string>& args);

struct WorkerJoin {
  RuntimeOptions options;  // the driver's settings
  JoinedPool joined;       // the node's GPUs; a pool client that leases nothing (DriverLink)
  std::unique_ptr<FrameSocket> driver;
  std::chrono::milliseconds linger{2000};
  uint64_t object_id_base = 0;  // this worker's objects take ids from here (Welcome::object_id_base)
  std::string objects_key;      // what the driver's UCX fetches of this worker's kept results carry
  bool driver_on_loopback = false;  // the driver is on this host's loopback (UCX stays on "lo")
};

// Errors name what was wrong (a missing flag, an unreadable secret, a driver that refused).
absl::StatusOr<WorkerJoin> JoinAsWorker(const std::vector<std::string>& args);

// Sends this process's stdout and stderr to the driver, line by line, until StopForwardingOutput
// (which flushes what is left).
void ForwardOutputTo(FrameSocket* driver);
void StopForwardingOutput();

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_BOOTSTRAP_WORKER_JOIN_H_
