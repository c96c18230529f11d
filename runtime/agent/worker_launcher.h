// File: runtime/agent/worker_launcher.h
//
// A node agent's workers (DESIGN §3, §6): starts them on the head's word, as the user the policy
// allows, keeps track of them by job, reaps them, and stops them: a job's when the head says the
// job ended (StopJob), all of them when the agent goes. How one process is started is
// runtime/agent/worker_spawn.h.
//
//   WorkerLauncher workers({.node = "node-1", .allow_root_workers = false});
//   workers.StartAsync(launch, /*run_as=*/"vision", /*team=*/"vision",
//                      [](absl::StatusOr<int> pid) { /* the worker has exec'd, or why not */ });
//   workers.StopJob(launch.job);   // SIGTERM to each of its process groups, SIGKILL 1 s later
//
// Who a worker runs as. An agent running as root starts workers as the team's `run_as` user, and
// as root only when it was told it may (--allow-root-workers) and the team has no `run_as`; a root
// run_as needs that permission too. An agent not running as root starts them as its own user, and
// refuses a `run_as` naming another (it could not switch to it).
//
// Threads. One thread of the launcher's own spawns every worker (the parent-death signal is tied
// to the thread that forks, and this one lives exactly as long as the workers may), reaps them
// (waitpid on each, polled: never waitpid(-1), which would steal the statuses of the agent
// process's other children) and sends the SIGKILLs that follow the SIGTERMs. Every method is
// thread-safe. When a worker's leading process has exited, whatever is left in its process group
// is killed: nothing of a worker outlives it on the node's GPUs.
#ifndef GPUPOOL_RUNTIME_AGENT_WORKER_LAUNCHER_H_
#define GPUPOOL_RUNTIME_AGENT_WORKER_LAUNCHER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "runtime/rpc/worker_launch.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

struct WorkerLauncherOptions {
  std::string node;  // this agent's node, as the head names it (in refusals)
  // Run workers as root when the agent is root and the team has no run_as user
  // (`gpupool agent --allow-root-workers`).
  bool allow_root_workers = false;
  std::chrono::milliseconds stop_grace{1000};  // from SIGTERM to SIGKILL
};

class WorkerLauncher {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<int>) &&>;

  explicit WorkerLauncher(WorkerLauncherOptions options);
  // Stops every worker (SIGTERM, SIGKILL after the grace) and waits until each is reaped.
  ~WorkerLauncher();
  WorkerLauncher(const WorkerLauncher&) = delete;
  WorkerLauncher& operator=(const WorkerLauncher&) = delete;

  // Starts a worker of `launch.job` for `team`, as `run_as` ("" for none) within the policy of the
  // file comment; `done` gets its pid once it has exec'd, or why it was refused or failed, on the
  // launcher's thread (it must not call back into the launcher and wait). Refused before any fork:
  // another node's launch (InvalidArgument), a relative or missing executable ("<path> does not
  // exist on node <node>", NotFound) or one that is not executable (FailedPrecondition), a user
  // the policy refuses (FailedPrecondition, saying what to configure), an unknown run_as user
  // (NotFound), an agent that is stopping (Unavailable).
  void StartAsync(WorkerLaunch launch, std::string run_as, std::string team, Done done);
  // Stops `job`'s workers: SIGTERM to each one's process group now, SIGKILL after the grace if
  // it has not exited. Returns at once; a job without workers here is no error. A start of the
  // job asked for before this and not done yet is stopped too: the head asks for a start, then
  // (its job gone) for the stop, in that order, and the start may still be queued here.
  void StopJob(const std::string& job);

  // The workers of `job` not reaped yet (being stopped included), by pid.
  std::vector<int> WorkersOf(const std::string& job) const;

 private:
  struct Pending {
    WorkerLaunch launch;
    std::string run_as;
    std::string team;
    Done done;
    uint64_t asked_at = 0;  // seq_ when it was asked for
  };
  struct Worker {
    std::string job;
    bool stopping = false;
    std::chrono::steady_clock::time_point kill_at;  // when stopping: SIGKILL from then on
  };

  void Loop();  // the launcher's thread
  // The checks made before forking, then the fork (launcher's thread, without mu_).
  absl::StatusOr<int> Spawn(const Pending& p);
  // Reaps exited workers, kills what their groups left, sends due SIGKILLs; when the next is due.
  std::chrono::steady_clock::time_point Tend() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Terminate(int pid, Worker& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerLauncherOptions options_;

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Orders starts and stops: a start asked for before its job's last stop is not wanted. Stops
  // are remembered only while some start may still be older than them (cleared when none waits).
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> stopped_at_ ABSL_GUARDED_BY(mu_);  // by job
  bool StoppedSince(const Pending& p) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unreaped workers by pid (which is also their process group's id). A pid here cannot have
  // been reused: it is reaped, under mu_, only when it leaves this map; so signals sent to it
  // under mu_ reach the worker and nothing else.
  std::map<int, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // started last
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_WORKER_LAUNCHER_H_
