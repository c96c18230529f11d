// File: runtime/agent/worker_spawn.h
//
// Starting one worker process exactly as a WorkerLaunch says (runtime/rpc/worker_launch.h), and
// knowing that it started: fork, then in the child only async-signal-safe calls (the agent has
// other threads, whose locks the child inherits held), then exec. posix_spawn cannot do this: it
// has no parent-death signal and no user switch.
//
//   absl::StatusOr<WorkerIdentity> as = ResolveUser("nobody");       // or WorkerIdentity{} (the agent's)
//   absl::StatusOr<int> pid = SpawnWorker(launch, *as);              // exec'd, or why not
//
// The child: leads a process group of its own (so that the whole worker, children included, is
// stopped at once); gets SIGKILL when the thread that spawned it exits (PR_SET_PDEATHSIG, and
// exits at once if the agent died before that was set); default signal dispositions and an empty
// signal mask (the agent blocks SIGTERM in its threads, and exec keeps a blocked mask); stdin from
// /dev/null, stdout and stderr the agent's; no other descriptor of the agent but the secret's pipe,
// whose number it is told by "--gpupool-worker-secret-fd=N" appended to its arguments (the secret
// is in the pipe, then end of file); the agent's environment with `env` applied; `cwd`, or "/"
// when that is empty or cannot be entered; the identity's groups, gid and uid.
//
// The caller reaps the child (waitpid) once SpawnWorker returned its pid. Thread-safe; blocks
// until the child has exec'd or failed.
#ifndef GPUPOOL_RUNTIME_AGENT_WORKER_SPAWN_H_
#define GPUPOOL_RUNTIME_AGENT_WORKER_SPAWN_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/rpc/worker_launch.h"

namespace gpupool::runtime {

// Who a worker runs as: the agent's own user (`switch_user` false), or the user `name`.
struct WorkerIdentity {
  bool switch_user = false;
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, as initgroups would set them
};

// `name`'s uid, primary gid and groups on this node (getpwnam_r, getgrouplist: resolved in the
// parent, because the name service is no async-signal-safe thing to call in a forked child).
// NotFound when there is no such user.
absl::StatusOr<WorkerIdentity> ResolveUser(const std::string& name);

// Starts `launch.executable` as `as`; its pid once it has exec'd. The error names the executable
// and the step that failed in the child (entering the user, exec) with the system's reason.
// Bound to the calling thread: the worker is killed when that thread exits.
absl::StatusOr<int> SpawnWorker(const WorkerLaunch& launch, const WorkerIdentity& as);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_WORKER_SPAWN_H_
