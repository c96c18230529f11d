// File: runtime/tasks/worker_pool.h
//
// The driver's side of its worker processes: a job joined to a shared head runs tasks wherever
// it holds leases, and on a node where it has no process of its own a worker runs them for it
// (Ray's model: the driver owns the tasks, workers execute them). WorkerPool listens for the
// workers, has the pool start one when a node needs one (PoolClient::StartWorker: the head tells
// the node's agent), admits it once it proves it holds the job's secret (having proved it first:
// runtime/tasks/job_proof.h), and keeps one connection per
// node. The lease threads (runtime/tasks/remote_leases.h) send tasks over it; the connection's
// reader thread hands each frame it receives to the handlers the pool was made with.
//
// A worker leaves by itself when it has had no lease for its linger (it says Bye first); it dies
// with its agent, and is told to stop when the driver ends. Which of its tasks were running then
// is the handlers' business (on_lost).
//
// Thread-safety: thread-safe. The handlers run on the connection's reader thread.
#ifndef GPUPOOL_RUNTIME_TASKS_WORKER_POOL_H_
#define GPUPOOL_RUNTIME_TASKS_WORKER_POOL_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/client/pool_client.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime {

// One worker process of the job, connected.
class WorkerConnection : public std::enable_shared_from_this<WorkerConnection> {
 public:
  WorkerConnection(std::string node, int64_t pid, uint64_t object_id_base, std::unique_ptr<FrameSocket> socket)
      : node_(std::move(node)), pid_(pid), object_id_base_(object_id_base), socket_(std::move(socket)) {}
  ~WorkerConnection() { StopSending(); }
  const std::string& node() const { return node_; }
  int64_t pid() const { return pid_; }
  // The worker's objects have ids from here (wire::kWorkerIdSpan of them).
  uint64_t object_id_base() const { return object_id_base_; }
  absl::Status Send(std::string_view frame) { return socket_->Send(frame); }
  // Sends from threads that must never wait for the worker (above all the connection's reader:
  // were it to block sending while the worker blocks sending to it, neither would read again).
  // `make` runs on the connection's sender thread, in order, and gives the frame to send; or
  // nothing yet (an answer whose object is still being computed), and it is asked again a few
  // milliseconds later. Dropped unrun when the connection closes.
  void Post(std::function<std::optional<std::string>()> make) ABSL_LOCKS_EXCLUDED(out_mu_);
  // The same for a frame made already.
  void PostFrame(std::string frame) ABSL_LOCKS_EXCLUDED(out_mu_) {
    Post([frame = std::move(frame)] { return frame; });
  }
  // The worker said Bye, or its connection ended: send it nothing new.
  bool leaving() const { return leaving_.load(); }

 private:
  friend class WorkerPool;
  void SendLoop() ABSL_LOCKS_EXCLUDED(out_mu_);
  void StopSending() ABSL_LOCKS_EXCLUDED(out_mu_);

  const std::string node_;
  const int64_t pid_;
  const uint64_t object_id_base_;
  std::unique_ptr<FrameSocket> socket_;
  std::atomic<bool> leaving_{false};
  std::thread reader_;
  std::thread sender_;
  Mutex out_mu_;
  CondVar out_cv_;
  std::deque<std::function<std::optional<std::string>()>> out_ ABSL_GUARDED_BY(out_mu_);
  bool closing_ ABSL_GUARDED_BY(out_mu_) = false;
};

struct WorkerPoolOptions {
  PoolClient* pool = nullptr;  // starts workers (outlives the WorkerPool)
  std::string job_id;
  // What every worker is started as (node and secret filled in per start).
  WorkerLaunch launch;
  // Where workers reach the driver: this host's address as the nodes see it.
  std::string listen_host = "127.0.0.1";
  // The Welcome every worker gets (node_inventory filled in per node by describe_node).
  wire::Welcome welcome;
  std::function<absl::StatusOr<std::string>(const std::string& node)> describe_node;
  std::function<double()> pool_now;
  std::chrono::milliseconds start_timeout{30000};

  // Handlers, called on the connection's reader thread.
  std::function<void(WorkerConnection& from, std::vector<wire::Outcome> outcomes)> on_outcomes;
  // The connection ended (`bye`: the worker said it was leaving, so nothing it had was running).
  std::function<void(WorkerConnection& gone, const absl::Status& why, bool bye)> on_lost;
  std::function<void(WorkerConnection& from, const wire::Log& line)> on_log;
  std::function<void(WorkerConnection& from, const wire::Checkpointed& note)> on_checkpointed;
  // A worker asks for one of the driver's objects: answer with from.Post (wire::Fetched), never
  // with a Send on this thread (see WorkerConnection::Post).
  std::function<void(WorkerConnection& from, const wire::Fetch& ask)> on_fetch;
  // A worker answers the driver's Fetch of an object it keeps for the driver.
  std::function<void(WorkerConnection& from, const wire::FetchedView& answer)> on_fetched;
  // A worker holds a ref to one of the driver's objects, and lets go of it.
  std::function<void(WorkerConnection& from, const wire::Borrow& borrow)> on_borrow;
  std::function<void(WorkerConnection& from, const wire::Release& release)> on_release;
  // Where a worker serves the results it keeps over UCX.
  std::function<void(WorkerConnection& from, const wire::ObjectsAt& at)> on_objects_at;
  // A worker's task submits a GPU task: answer with from.PostFrame (wire::Submitted).
  std::function<void(WorkerConnection& from, wire::Submit&& submit)> on_submit;
};

class WorkerPool {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(WorkerPoolOptions options);
  // Tells every worker to stop, then waits for their connections to end (at most ~2 s).
  ~WorkerPool();
  // The job is shutting down: a start under way gives up at once (kCancelled), no new one begins
  // and no late worker is admitted; connected workers serve on until the pool is destroyed.
  void StopStarting() ABSL_LOCKS_EXCLUDED(mu_);

  // The job's worker on `node`, started (and waited for) when it has none. Concurrent callers
  // for one node share one start. Errors name the node and why (the agent's refusal, a worker
  // that never connected, one that exited before it said hello).
  absl::StatusOr<std::shared_ptr<WorkerConnection>> WorkerOn(const std::string& node) ABSL_LOCKS_EXCLUDED(mu_);
  // How many workers are connected now (tests, Stats), and on which nodes.
  size_t connected() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> ConnectedNodes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint16_t port() const { return listener_->port(); }

 private:
  explicit WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {}
  void AcceptLoop();
  // Admits one connection (its Hello checked against the job and the node it was started for),
  // on a thread of its own: a connection that says nothing holds up no other.
  void Admit(std::unique_ptr<FrameSocket> socket) ABSL_LOCKS_EXCLUDED(mu_);
  void ReapAdmissions(bool all);
  void ReadLoop(std::shared_ptr<WorkerConnection> worker);

  const WorkerPoolOptions options_;
  std::unique_ptr<FrameListener> listener_;
  std::thread accept_thread_;
  // Admissions in progress or ended and not yet joined; only the accept thread touches them (and
  // the destructor, after it has ended).
  struct Admission {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Admission> admissions_;

  // A node's worker, from the start request until it is gone.
  struct Slot {
    std::shared_ptr<WorkerConnection> worker;  // once connected
    bool starting = false;
    absl::Status failure;                      // the last start's, for the callers waiting on it
    uint64_t generation = 0;                   // bumped per start
  };
  mutable Mutex mu_;
  CondVar cv_;
  std::map<std::string, Slot> nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<WorkerConnection>> all_ ABSL_GUARDED_BY(mu_);  // every connection made, to join
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Workers welcomed so far: the next one's range of object ids (wire::Welcome::object_id_base).
  uint64_t welcomed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_WORKER_POOL_H_
