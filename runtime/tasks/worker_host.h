// File: runtime/tasks/worker_host.h
//
// A worker process's side of its driver (the other side is runtime/tasks/worker_pool.h and
// remote_leases.h). A node's agent starts the worker for a job that holds leases on the node;
// the worker joins its driver (runtime/bootstrap/worker_join.h), starts a JobRuntime over the
// node's GPUs, and WorkerHost serves the driver with it: for each lease the driver names, a thread
// runs the tasks sent for it one after another (as a local lease's thread does in the driver),
// each confined to the lease's slots, memory budget and stream; outcomes go back in batches. One
// worker serves all of the job's leases on its node, so tasks share its CUDA contexts, as tasks
// in one process do.
//
// The worker leases nothing itself: its pool client (DriverLink) refuses requests, and passes
// snapshot notes to the driver, which tells the head. A GPU task that a worker's task submits goes
// to the driver, which submits it as its own (SubmitToDriver, runtime/tasks/submits_to_driver.h).
//
// Objects: refs to the driver's objects nested in a task's arguments are imported under the
// driver's ids (runtime/tasks/driver_imports.h: fetched over the same connection when needed), so
// a ref a task returns or passes on still names the driver's object. The other way, the worker keeps for the driver (HoldForDriver) a
// result too big to go with its outcome, and each object it made whose ref went to the driver
// (ExportObject, while EncodingForDriver); the driver fetches them when it needs the values and
// gives the holds back (runtime/tasks/remote_objects.h is its side). A kept result a task of the
// job reads as its input is fetched by that task's worker from here over UCX, or read in place
// by this worker's own tasks (runtime/tasks/task_inputs.h). A worker holding anything for its
// driver does not leave on its linger.
//
// Thread-safety: Serve runs on the caller's thread (it reads the connection); each lease has its
// own thread; a task's thread may block in SubmitToDriver until Serve reads the answer; TaskInputs
// ends its fetches on a thread of its own; sends are serialised by the FrameSocket.
#ifndef GPUPOOL_RUNTIME_TASKS_WORKER_HOST_H_
#define GPUPOOL_RUNTIME_TASKS_WORKER_HOST_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpupool/internal/object_header.h"
#include "runtime/client/pool_client.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/driver_imports.h"
#include "runtime/tasks/job_runtime.h"
#include "runtime/tasks/submits_to_driver.h"
#include "runtime/tasks/task_inputs.h"
#include "runtime/tasks/worker_protocol.h"
#include "transport/object_transfer.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

// The worker's pool client: see the top of the file.
class DriverLink final : public PoolClient {
 public:
  DriverLink(FrameSocket* driver, double pool_now_s, double clock_speed)
      : driver_(driver), base_s_(pool_now_s), clock_speed_(clock_speed), since_(std::chrono::steady_clock::now()) {}
  absl::Status Request(pool::LeaseRequest request, LeaseListener* listener) override;
  absl::Status Withdraw(const std::string& request_id) override;
  absl::Status Release(const std::string& lease_id) override;
  void Checkpointed(const std::string& lease_id, const CheckpointNote& note) override;
  double Now() const override;
  const pool::PoolConfig& config() const override { return config_; }
  double capacity_gpus() const override { return 0; }
  std::map<std::string, LedgerTeam> Ledger() const override { return {}; }

 private:
  FrameSocket* const driver_;
  const double base_s_;
  const double clock_speed_;
  const std::chrono::steady_clock::time_point since_;
  const pool::PoolConfig config_;
};

class WorkerHost {
 public:
  // `linger`: with no lease for this long, the worker says Bye and Serve returns. `objects_key`:
  // what UCX fetches of kept results must carry, the driver's and the job's other workers' (and
  // what this worker's own fetches of inputs carry) (Welcome::objects_key; results are
  // served over this connection only when UCX cannot start, or the key is empty or too long);
  // `loopback`: the driver is on this host's loopback.
  WorkerHost(JobRuntime& runtime, FrameSocket& driver, std::chrono::milliseconds linger,
             const std::string& objects_key = "", bool loopback = true);
  ~WorkerHost();

  // Serves until the driver says stop, the connection ends, or the linger passes with no lease.
  // OK for a stop or the linger; the connection's error otherwise.
  absl::Status Serve();
  // Runs when the connection to the driver ends unasked, before the leases are stopped (which
  // waits for their running tasks to reach a safe point): the worker process sets a deadline for
  // its own exit here, so a task that never reaches one cannot outlive its driver. Before Serve.
  void OnDriverLost(std::function<void()> lost) { on_driver_lost_ = std::move(lost); }

  // The driver's object `id` in this worker's store under that id, fetched when a task needs
  // its value and borrowed meanwhile (runtime/tasks/driver_imports.h); retained for the caller.
  // Any thread.
  detail::ObjectHeader* Import(uint64_t object, detail::BoxDecoder decode);
  // A GPU task that a task of this worker submits: the driver submits it as its own, and its
  // result (the driver's object) is imported here, retained for the caller. Takes the references
  // `args` holds. The refs among its arguments go by id, except an ObjectRef argument this worker
  // made, which goes as its value (waited for, when a task here still computes it). Throws Error
  // when an argument cannot go (a ref this worker made nested inside a value, or a value of its
  // own holding one), the driver refuses the task (naming why), or the worker is stopping. A task
  // thread (it waits for the driver's answer). `made_here`: whether this worker made an object.
  detail::ObjectHeader* SubmitToDriver(const detail::FunctionInfo* function, detail::EncodedArgs args,
                                       const TaskOptions& options, bool (*made_here)(ObjectId));
  // The host whose driver receives what the calling thread is encoding (a task's result, an
  // answer to the driver's Fetch), or null: refs met there leave this process for the driver (a
  // task's own SendValue to its group of one does not).
  static WorkerHost* EncodingForDriver();
  // One more hold on an object of this worker's whose ref goes to the driver (retained on the
  // first), kept until the driver gives its holds back. Any thread.
  void HoldForDriver(detail::ObjectHeader* object) ABSL_LOCKS_EXCLUDED(held_mu_);
  // One of the driver's objects met while encoding for the driver: this worker's copy (and so
  // its borrow) is kept until what is being encoded has been sent, so the driver reads the ref
  // before it hears the worker let go of it.
  void KeepUntilSent(detail::ObjectHeader* object);

 private:
  // Fails every import still waiting for its value and refuses new ones: the worker is stopping
  // (every exit of Serve does this; the answers would never be read).
  void StopImports();

  struct Lease {
    LeaseRun run;
    Mutex mu;
    CondVar cv;
    std::deque<Task*> queue ABSL_GUARDED_BY(mu);
    bool done ABSL_GUARDED_BY(mu) = false;  // the driver is done with it: end once the queue is empty
    std::atomic<bool> finished{false};
    std::thread thread;
  };

  void OnTasks(wire::Tasks&& tasks);
  void OnStopLease(const wire::StopLease& stop);
  void StopAll();  // every lease lost, every thread joined
  void ReapFinished();
  void LeaseLoop(Lease* lease);
  // The task for a message, or null with `refusal` filled (a function this program lacks, bad options).
  Task* MakeTask(wire::TaskToRun&& t, wire::Outcome& refusal);
  // The outcome as sent; the driver's objects its result names are added to `kept` (retained),
  // to be let go once it has been sent.
  wire::Outcome Report(Task* task, LeaseRun& run, RunOutcome&& outcome, std::vector<detail::ObjectHeader*>& kept);
  void DropTask(Task* task);
  void Send(std::vector<wire::Outcome>& outcomes);

  JobRuntime& rt_;
  FrameSocket& driver_;
  std::function<void()> on_driver_lost_;
  const std::chrono::milliseconds linger_;
  const std::string worker_name_;  // " (worker pid N)", appended to locations
  const std::string objects_key_;  // Welcome::objects_key (ServingOverUcx)
  const bool loopback_;
  std::map<std::string, std::unique_ptr<Lease>> leases_;  // Serve's thread only
  std::map<std::string, TaskShape*> shapes_;              // by encoded options; Serve's thread only

  // What this worker keeps for its driver (HoldForDriver), by the object's id, with the driver's
  // holds on it. The driver's Fetch is answered on Serve's thread; one for an object still being
  // computed waits in deferred_ (Serve's thread only) and is answered once it is resolved.
  void OnDriverFetch(const wire::Fetch& ask) ABSL_LOCKS_EXCLUDED(held_mu_);
  void OnRelease(const wire::Release& release) ABSL_LOCKS_EXCLUDED(held_mu_);
  void AnswerDeferred();
  // Gives back one hold on each (an encoding that failed made them for nothing).
  void DropHolds(const std::vector<uint64_t>& ids) ABSL_LOCKS_EXCLUDED(held_mu_);
  bool HoldsAnything() ABSL_LOCKS_EXCLUDED(held_mu_);
  // The answer for a resolved object, as a frame (wire::AnswerFetch).
  std::string Answer(uint64_t request, detail::ObjectHeader* object);
  struct Held {
    detail::ObjectHeader* object = nullptr;  // retained
    uint64_t holds = 0;                      // the driver's, not given back yet
    // A kept result only: the holds made when it was encoded (dropped when the driver lets go of
    // it unread), and the driver's objects it names (retained until then).
    std::vector<uint64_t> nested;
    std::vector<detail::ObjectHeader*> kept;
    bool read = false;      // the driver said it read the value (wire::Release::read)
    uint64_t refs_read = 0;  // or the first this many refs inside, before its codec threw
    bool served = false;    // in registry_ (the driver and other workers may fetch it over UCX)
    bool result = false;    // a kept result: `object` holds its encoded bytes
  };
  Mutex held_mu_;
  std::map<uint64_t, Held> held_ ABSL_GUARDED_BY(held_mu_);
  std::vector<std::pair<wire::Fetch, detail::ObjectHeader*>> deferred_;  // retained

  // The driver's objects this worker has copies of; shared with the store, which may outlive the host.
  std::shared_ptr<DriverImports> imports_;
  // Tasks' inputs other workers keep (or this one): fetched from there. Before the UCX members:
  // a fetch the fetcher fails as it goes still finds it.
  std::unique_ptr<TaskInputs> inputs_;
  SubmitsToDriver submits_;
  // This worker's kept result `id` (a ready entry of encoded bytes), retained; null when not kept.
  detail::ObjectHeader* KeptResult(uint64_t id) ABSL_LOCKS_EXCLUDED(held_mu_);

  // Kept results served over UCX, started with the first one (so a worker that keeps none and
  // fetches no input from another worker pays nothing for UCX): whether it serves them so. Any
  // thread.
  bool ServingOverUcx() ABSL_LOCKS_EXCLUDED(ucx_mu_);
  // UCX for fetching inputs from the workers that keep them, started with the first such input.
  TaskInputs::Ucx FetchingOverUcx() ABSL_LOCKS_EXCLUDED(ucx_mu_);
  // The UCX worker, made once (null when it cannot start: no objects key, or UCX failed).
  transport::UcxWorker* UcxLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ucx_mu_);
  // In this order: the server and the fetcher go before the registry, the registry's entries
  // before it, the UCX worker last. Null when UCX could not start.
  Mutex ucx_mu_;
  bool ucx_tried_ ABSL_GUARDED_BY(ucx_mu_) = false;
  bool server_tried_ ABSL_GUARDED_BY(ucx_mu_) = false;
  bool fetcher_tried_ ABSL_GUARDED_BY(ucx_mu_) = false;
  std::unique_ptr<transport::UcxWorker> ucx_;
  transport::ObjectRegistry registry_;
  std::unique_ptr<transport::ObjectServer> ucx_server_;
  std::unique_ptr<transport::ObjectFetcher> ucx_fetcher_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_WORKER_HOST_H_
