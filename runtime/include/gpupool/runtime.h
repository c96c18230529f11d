// File: gpupool/runtime.h
//
// The task API. Init starts a runtime (an embedded pool over this machine's GPUs, or simulated
// GPUs when it has none); Submit runs registered functions on pooled GPUs and returns ObjectRefs;
// Get, Wait, Put and Cancel work on those refs.
//
//   int Square(int x) { return x * x; }
//   GPUPOOL_REMOTE(Square);
//
//   int main(int argc, char** argv) {
//     gpupool::Runtime runtime = gpupool::Init(argc, argv);
//     gpupool::ObjectRef<int> a = gpupool::Submit(Square, 3);
//     gpupool::ObjectRef<int> b = gpupool::Task(Square).Gpus(0.25).Team("search").Submit(a);
//     std::cout << *gpupool::Get(b) << "\n";   // 81: b ran once a existed
//   }
//
// A process has one runtime at a time (Init while one is running throws kFailedPrecondition), as
// with Ray and MPI: registered functions are process-wide and a process is one node of the job.
// The free functions use it; the Runtime object owns it and stops it when destroyed (pending tasks
// fail with kCancelled, running ones finish, leases go back to the pool).
//
// Errors: an exception in a task comes back from Get as gpupool::TaskError, naming the task,
// where it ran and the original message. System failures (a lease lost to a failed or draining GPU)
// are retried up to TaskOptions::max_retries times. Requests the pool can never satisfy fail the
// task with the pool's reason (kFailedPrecondition or kInvalidArgument).
//
// Threads and tasks:
//   - Submit, Task(f)...Submit, Get, Wait, Put and Cancel are thread-safe: call them from any
//     thread, and from inside a running task (a task may submit tasks, Put values and Get or Wait
//     for results). A task that waits in Get or Wait keeps its worker (a CPU worker thread, or its
//     lease's one thread, and so the lease) while it waits, and no other worker is started in its
//     place: if every worker that could run the awaited task is itself waiting, the job stops
//     making progress. Passing the ObjectRef as an argument instead makes it a dependency, which
//     holds no worker until it is ready.
//   - Runtime::Stats, notice, rank, ranks and node are thread-safe, inside tasks too, for as long
//     as the Runtime lives.
//   - Init and the Runtime's destruction (or move-assignment over it) are not for tasks: call them
//     from the program's own thread (main's, typically). Init inside a task throws
//     kFailedPrecondition (a runtime is running). The destructor waits for running tasks, so a task
//     that destroyed it would wait for itself; other threads must have stopped calling into the
//     runtime first. Afterwards Submit, Put and Cancel throw kFailedPrecondition, and refs still
//     read their values (tasks still pending then failed with kCancelled).
//   - OptionsFromFlags touches no runtime: call it any time.
//   - A TaskContext is its task's, on the task's thread (task_context.h); ObjectRefs and Views may
//     be copied and dropped on any thread (object_ref.h); RuntimeOptions::on_event runs on the
//     runtime's threads, among them the one that receives lease grants, so it must not block or
//     wait for tasks.
#ifndef GPUPOOL_RUNTIME_H_
#define GPUPOOL_RUNTIME_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpupool/error.h"
#include "gpupool/export.h"
#include "gpupool/internal/task_option_expansion.h"  // not supported API: TaskBuilder's setters
#include "gpupool/internal/task_submission.h"  // not supported API: what the templates expand to
#include "gpupool/object_ref.h"
#include "gpupool/remote.h"
#include "gpupool/task_context.h"
#include "gpupool/task_options.h"

namespace gpupool {

// Something the pool did for this job, reported as it happens (the demo prints them).
struct RuntimeEvent {
  double pool_time_s = 0;
  std::string kind;    // "lease-granted", "lease-returned", "lease-revoked", "lease-lost",
                       // "request-refused", "task-preempted", "task-resumed",
                       // "checkpoint-failed", "worker-failed", "worker-lost", "object-rebuilt"
  std::string team;
  std::string lease;   // lease id
  std::string detail;  // where and what: "node-0/GPU 3 fraction 0.25 (borrowed)"
};

struct RuntimeOptions {
  // The embedded pool's GPUs: as gpupool::PoolOptions (real GPUs when present, else simulated).
  std::string driver;        // "", "nvidia" or "simulated"
  std::string simulate;      // "4xH100-80GB" per node; empty: config file or default
  int node_count = 1;        // simulated nodes in this process
  std::string config_path;   // YAML: teams, quotas, priority classes, simulated nodes
  std::string config_text;   // the same YAML given inline (instead of config_path)
  std::string team = "default";  // team of tasks that name none
  // A pool service in another process ("HOST:PORT": `gpupool head`, or a shared head). Empty:
  // under mpirun, rank 0 hosts the job's head and every rank is the agent of its own node;
  // otherwise the pool is embedded in this process. (--gpupool-pool, GPUPOOL_ADDRESS)
  std::string pool_address;
  std::string pool_token;    // the team's token in the head's configuration (GPUPOOL_TOKEN)
  // With pool_address: how long to keep trying to reach the head again when the connection is
  // lost (a restarted head). Leases held are lost (their tasks resume from their snapshots);
  // requests not granted yet are sent again. 0: fail the job's waiting tasks at once.
  double pool_reconnect_s = 60;
  // The node this process runs on, as the head knows it; empty: this host's name. Tasks prefer
  // this node's GPUs; a driver on no node of the pool runs every GPU task in workers.
  // (--gpupool-node, GPUPOOL_NODE)
  std::string node_name;
  // With pool_address: tasks run only on this process's node (the behaviour before workers), not
  // wherever the pool has room. (--gpupool-local-only, GPUPOOL_LOCAL_ONLY=1)
  bool local_only = false;
  // With pool_address, tasks placed on another node run in a worker process of this job that the
  // node's agent starts: this program re-executed there with --gpupool-worker (the same path:
  // nodes share or mirror the filesystem, as under MPI or Slurm), or `worker_binary` with
  // `worker_args` before gpupool's own flags. A worker with no lease for `worker_linger_ms` exits.
  // (--gpupool-worker-binary, GPUPOOL_WORKER_BINARY; --gpupool-worker-linger-ms, GPUPOOL_WORKER_LINGER_MS)
  std::string worker_binary;
  std::vector<std::string> worker_args;
  std::map<std::string, std::string> worker_env;  // added to the worker's environment
  int worker_linger_ms = 2000;
  // Workers' stdout and stderr reach this process's, line by line, prefixed "(<job> <node> pid=<pid>)".
  bool log_to_driver = true;
  // Under mpirun: where rank 0's head listens (loopback unless set; HOST or HOST:PORT).
  std::string head_listen = "127.0.0.1";
  bool use_mpi = true;       // false: ignore mpirun even when launched by it
  // Under mpirun: how long a rank waits in a collective for the others (TaskContext::AllReduce
  // ...) before it gives up with kDeadlineExceeded. A preempted rank's peers wait this long for
  // its task to resume.
  double collective_timeout_s = 600;
  double clock_speed = 1.0;  // pool seconds per real second (the demo runs hours in seconds)
  int cpu_workers = 0;       // threads for CPU tasks; 0: one per hardware thread
  int lease_linger_ms = 200; // an idle lease goes back to the pool after this long
  int max_leases_per_shape = 64;  // leases one shape of task may hold at once
  // Freed large host blocks kept for reuse, so a Put of a big value copies at memcpy speed
  // instead of paying page faults; sets glibc malloc options process-wide (see
  // runtime/objects/host_memory.h). 0: leave malloc's defaults.
  uint64_t host_memory_reuse_mib = 1024;
  // Where task snapshots go (a local or shared directory); empty: $GPUPOOL_CHECKPOINT_DIR, else
  // <temp dir>/gpupool-checkpoints-<uid>. Opened on the first Checkpointable task. Directories
  // and snapshots are private to the job's user (0700 / 0600).
  std::string checkpoint_dir;
  bool checkpoint_dir_shared = false;   // the directory is shared by nodes (NFS...): see
                                        // checkpoint/directory_backend.h for what changes
  int checkpoint_keep_last = 2;         // snapshots kept per task
  uint64_t checkpoint_staging_mib = 2048;  // host memory for snapshots being written
  std::function<void(const RuntimeEvent&)> on_event;  // called from the runtime's threads
};

struct TeamUsage {
  std::string team;
  double leased_gpu_hours = 0;    // pool time x GPUs (fractions count their compute share)
  double borrowed_gpu_hours = 0;  // the part leased beyond the team's nominal quota
  double busy_gpu_hours = 0;      // time tasks were running on those leases
  uint64_t leases = 0;
  uint64_t tasks_run = 0;
  uint64_t tasks_failed = 0;
  uint64_t preemptions = 0;        // task runs stopped by revoked or lost leases
  uint64_t snapshots = 0;          // checkpoints committed
  double lost_gpu_hours = 0;       // work since the last snapshot that preemptions threw away
};

// A checkpointable task that has not reached a safe point for more than twice its checkpoint
// interval: it cannot be snapshotted or preempted cleanly, so operators should know.
struct OverdueTask {
  std::string task;      // name
  uint64_t task_id = 0;
  std::string team;
  double since_safe_point_s = 0;  // pool seconds
  double interval_s = 0;
};

struct RuntimeStats {
  double pool_time_s = 0;
  double pool_gpus = 0;
  std::vector<TeamUsage> teams;   // sorted by name
  uint64_t scrubbed_bytes = 0;    // device memory zeroed before changing team
  uint64_t live_objects = 0;
  // Tasks anywhere: values this driver owns that its workers keep now (big results, objects a
  // worker made), not fetched yet; the bytes fetched from workers so far; and the bytes of
  // objects workers fetched from this driver (refs nested in arguments, read there).
  uint64_t objects_kept_by_workers = 0;
  uint64_t bytes_fetched_from_workers = 0;
  uint64_t bytes_fetched_by_workers = 0;
  uint64_t objects_fetched_over_ucx = 0;  // of those fetched from workers (the rest: over the connection)
  // Results made again from their lineage (their task run again) after the only worker keeping
  // them went away.
  uint64_t objects_rebuilt = 0;
  uint64_t queued_tasks = 0;              // runnable, waiting for a worker or a lease
  uint64_t waiting_for_dependencies = 0;  // submitted, some input not there yet
  std::vector<OverdueTask> overdue;       // see OverdueTask
};

namespace runtime {
class JobRuntime;
}  // namespace runtime
namespace detail {
struct RuntimeAccess;  // runtime/api/runtime.cc: Init, and the tests' seam (runtime/api/testing_seam.h)
}  // namespace detail

// The process's runtime, from Init. Move-only; destroying it stops the runtime (see above).
class GPUPOOL_API Runtime {
 public:
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  ~Runtime();  // stops the runtime (see above)

  RuntimeStats Stats() const;
  // Where the pool's notice went ("no NVIDIA driver: simulated pool ..."); empty when none.
  const std::string& notice() const;
  // Under mpirun: this process's rank and the number of ranks (0 and 1 otherwise).
  int rank() const;
  int ranks() const;
  // The node this process's tasks run on when the pool is remote (mpirun: "rank-<r>" for
  // simulated GPUs, the host for real ones); empty when the pool is embedded, or when this
  // process is on no node of the shared pool it joined (its GPU tasks all run in workers).
  const std::string& node() const;

 private:
  friend struct detail::RuntimeAccess;
  explicit Runtime(std::unique_ptr<runtime::JobRuntime> impl);

  std::unique_ptr<runtime::JobRuntime> impl_;
};

// Starts the runtime. The argv form reads and removes gpupool's own flags (`--gpupool-config
// FILE`, `--gpupool-simulate SPEC`, `--gpupool-nodes N`, `--gpupool-team NAME`,
// `--gpupool-clock-speed X`, `--gpupool-host-memory-reuse-mib N`, `--gpupool-pool HOST:PORT`,
// `--gpupool-token T`, `--gpupool-node NAME`, `--gpupool-head-listen HOST[:PORT]`), then the
// environment (GPUPOOL_CONFIG, GPUPOOL_SIMULATE, GPUPOOL_NODES, GPUPOOL_TEAM, GPUPOOL_DRIVER,
// GPUPOOL_CLOCK_SPEED, GPUPOOL_HOST_MEMORY_REUSE_MIB, GPUPOOL_ADDRESS, GPUPOOL_TOKEN,
// GPUPOOL_NODE, GPUPOOL_HEAD_LISTEN); flags win. Bad flags throw kInvalidArgument naming the
// flag. Under mpirun, every rank calls Init (a collective: see RuntimeOptions::pool_address).
GPUPOOL_API Runtime Init(int& argc, char** argv);
GPUPOOL_API Runtime Init(RuntimeOptions options = {});
// The options Init(argc, argv) would start with (environment, then flags), without starting: for
// callers that adjust them first, as the Python binding does with init()'s keywords.
GPUPOOL_API RuntimeOptions OptionsFromFlags(int& argc, char** argv);

// A task with options, submitted by Submit(args...). Options chain as in TaskOptions:
//
//   gpupool::Task(Score).Gpus(0.25).GpuMemoryMib(8192).Team("search").Submit(batch);
//
// A builder may be kept and submitted many times; its options are copied into each submission.
template <typename F>
class TaskBuilder {
 public:
  explicit TaskBuilder(F function) : function_(function) {}
  TaskBuilder& Options(TaskOptions o) { options_ = std::move(o); return *this; }
  // One setter per task option, as TaskOptions has (gpupool/task_option_list.h).
  GPUPOOL_TASK_OPTIONS(GPUPOOL_INTERNAL_TASK_BUILDER_SETTER)

  template <typename... Args>
  auto Submit(Args&&... args) const {
    return detail::SubmitWith(function_, &options_, std::forward<Args>(args)...);
  }
  const TaskOptions& options() const { return options_; }

 private:
  F function_;
  TaskOptions options_;
};

template <typename F>
TaskBuilder<F> Task(F function) {
  return TaskBuilder<F>(function);
}

// Submits with default options: a CPU task of the runtime's default team.
template <typename F, typename... Args>
auto Submit(F function, Args&&... args) {
  return detail::SubmitWith(function, nullptr, std::forward<Args>(args)...);
}

// Waits for the value and returns a read-only view of it (no copy). Throws the task's failure,
// kDeadlineExceeded after `timeout`, or kFailedPrecondition for an empty ref.
template <typename T>
View<T> Get(const ObjectRef<T>& ref) {
  return ref.GetView();
}
template <typename T, typename Rep, typename Period>
View<T> Get(const ObjectRef<T>& ref, std::chrono::duration<Rep, Period> timeout) {
  return ref.GetView(std::chrono::steady_clock::now() + timeout);
}
template <typename T>
std::vector<View<T>> Get(const std::vector<ObjectRef<T>>& refs) {
  std::vector<View<T>> views;
  views.reserve(refs.size());
  for (const ObjectRef<T>& r : refs) views.push_back(r.GetView());
  return views;
}

template <typename T>
struct WaitResult {
  std::vector<ObjectRef<T>> ready;      // in the order given
  std::vector<ObjectRef<T>> not_ready;
};

// Returns once `num_ready` of the refs are ready (or failed), or at the timeout, as Ray's wait.
template <typename T, typename Rep = int64_t, typename Period = std::ratio<1>>
WaitResult<T> Wait(const std::vector<ObjectRef<T>>& refs, size_t num_ready,
                   std::chrono::duration<Rep, Period> timeout = std::chrono::hours(24 * 365)) {
  std::vector<detail::ObjectHeader*> headers;
  headers.reserve(refs.size());
  for (const ObjectRef<T>& r : refs) {
    if (r.empty()) throw Error(ErrorCode::kFailedPrecondition, "Wait on an empty ObjectRef");
    headers.push_back(detail::ObjectRefAccess::Header(r));
  }
  std::unique_ptr<bool[]> ready(new bool[refs.size()]());
  detail::WaitObjects(headers.data(), headers.size(), num_ready,
                      std::chrono::steady_clock::now() + timeout, ready.get());
  WaitResult<T> result;
  for (size_t i = 0; i < refs.size(); ++i) (ready[i] ? result.ready : result.not_ready).push_back(refs[i]);
  return result;
}

// Stores a value: copied once from an lvalue, moved from an rvalue.
template <typename T>
ObjectRef<std::remove_cvref_t<T>> Put(T&& value) {
  using V = std::remove_cvref_t<T>;
  return detail::ObjectRefAccess::Adopt<V>(
      detail::PutValue(std::make_unique<detail::TypedBox<V>>(std::forward<T>(value))));
}

// A pending task is dropped and its result fails with kCancelled; a running one sees
// TaskContext::cancelled() (and Step() throws), and its result fails with kCancelled. No effect on
// a finished one or a Put value.
template <typename T>
void Cancel(const ObjectRef<T>& ref) {
  if (!ref.empty()) detail::CancelObject(detail::ObjectRefAccess::Header(ref));
}

}  // namespace gpupool

#endif  // GPUPOOL_RUNTIME_H_
