// File: runtime/tasks/worker_pool.cc
#include "runtime/tasks/worker_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/client/fresh_token.h"
#include "runtime/tasks/job_proof.h"

namespace gpupool::runtime {
namespace {

// Connections being admitted at once; more are closed unread (a worker's start takes far longer
// than its hello, so only a flood meets this).
constexpr size_t kMaxAdmitting = 32;

}  // namespace

void WorkerConnection::Post(std::function<std::optional<std::string>()> make) {
  {
    MutexLock lock(&out_mu_);
    if (closing_) return;
    out_.push_back(std::move(make));
    if (!sender_.joinable()) sender_ = std::thread([this] { SendLoop(); });  // on first use
  }
  out_cv_.NotifyAll();
}

void WorkerConnection::SendLoop() {
  std::vector<std::function<std::optional<std::string>()>> later;  // not ready: asked again soon
  MutexLock lock(&out_mu_);
  while (true) {
    if (out_.empty() && !closing_) {
      if (later.empty()) {
        out_cv_.Wait(&out_mu_);
      } else {
        out_cv_.WaitUntil(&out_mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(2));
        for (auto& f : later) out_.push_back(std::move(f));
        later.clear();
      }
      continue;
    }
    if (closing_) break;
    std::function<std::optional<std::string>()> make = std::move(out_.front());
    out_.pop_front();
    lock.Unlock();
    std::optional<std::string> frame = make();
    if (!frame.has_value()) {
      later.push_back(std::move(make));
    } else {
      make = nullptr;  // what it held goes now, not with the next item
      (void)socket_->Send(*frame);  // a failure is the connection ending: its reader reports it
    }
    lock.Lock();
  }
  std::deque<std::function<std::optional<std::string>()>> dropped;
  dropped.swap(out_);
  lock.Unlock();
  dropped.clear();
  later.clear();
}

void WorkerConnection::StopSending() {
  std::thread sender;
  {
    MutexLock lock(&out_mu_);
    closing_ = true;
    sender.swap(sender_);  // Post starts none after this
  }
  out_cv_.NotifyAll();
  if (sender.joinable()) sender.join();
}

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(WorkerPoolOptions options) {
  if (options.launch.secret.empty()) {
    absl::StatusOr<std::string> secret = FreshToken();
    if (!secret.ok()) return secret.status();
    options.launch.secret = *secret;
  }
  absl::StatusOr<std::unique_ptr<FrameListener>> listener = FrameListener::Listen(options.listen_host, 0);
  if (!listener.ok()) return listener.status();
  // gpupool's own flags go last, after the program's (worker_args): Init finds them anywhere.
  std::string host = options.listen_host.find(':') != std::string::npos ? absl::StrCat("[", options.listen_host, "]")
                                                                         : options.listen_host;
  options.launch.args.push_back("--gpupool-worker");
  options.launch.args.push_back(absl::StrCat("--gpupool-worker-driver=", host, ":", (*listener)->port()));
  options.launch.args.push_back(absl::StrCat("--gpupool-worker-job=", options.job_id));
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(options)));
  pool->listener_ = *std::move(listener);
  pool->accept_thread_ = std::thread([p = pool.get()] { p->AcceptLoop(); });
  return pool;
}

void WorkerPool::StopStarting() {
  MutexLock lock(&mu_);
  stopping_ = true;
  cv_.NotifyAll();
}

WorkerPool::~WorkerPool() {
  StopStarting();  // from here no connection joins all_ (Admit checks stopping_)
  std::vector<std::shared_ptr<WorkerConnection>> all;
  {
    MutexLock lock(&mu_);
    all = all_;
  }
  listener_->Shutdown();
  accept_thread_.join();
  // Posted, not sent: a sender in the middle of a big frame to a worker that stopped reading would
  // hold a Send up for good; the shutdown below ends it.
  for (auto& w : all) w->PostFrame(wire::EncodeStop());
  // A worker told to stop closes its end; one that does not (hung in a task) is cut off after a
  // while, and its agent kills it when the head sees this job gone.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& w : all) {
    while (!w->leaving() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    w->socket_->Shutdown();
    if (w->reader_.joinable()) w->reader_.join();
    w->StopSending();
  }
}

size_t WorkerPool::connected() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [node, slot] : nodes_) n += slot.worker != nullptr && !slot.worker->leaving();
  return n;
}

std::vector<std::string> WorkerPool::ConnectedNodes() const {
  MutexLock lock(&mu_);
  std::vector<std::string> nodes;
  for (const auto& [node, slot] : nodes_) {
    if (slot.worker != nullptr && !slot.worker->leaving()) nodes.push_back(node);
  }
  return nodes;
}

absl::StatusOr<std::shared_ptr<WorkerConnection>> WorkerPool::WorkerOn(const std::string& node) {
  uint64_t generation;
  bool launch = false;  // this caller asks the pool; concurrent callers wait for the same worker
  {
    MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("the job is shutting down");
    Slot& slot = nodes_[node];
    if (slot.worker != nullptr && !slot.worker->leaving()) return slot.worker;
    if (!slot.starting) {
      slot.starting = true;
      slot.worker = nullptr;
      slot.failure = absl::OkStatus();
      ++slot.generation;
      launch = true;
    }
    generation = slot.generation;
  }
  if (launch) {
    WorkerLaunch start = options_.launch;
    start.node = node;
    start.args.push_back(absl::StrCat("--gpupool-worker-node=", node));
    absl::StatusOr<int> pid = options_.pool->StartWorker(start);
    if (!pid.ok()) {
      absl::Status failed(pid.status().code(), absl::StrCat("could not start a worker of job ", options_.job_id,
                                                            " on node ", node, ": ", pid.status().message()));
      MutexLock lock(&mu_);
      Slot& slot = nodes_[node];
      if (slot.generation == generation) {
        slot.starting = false;
        slot.failure = failed;
      }
      cv_.NotifyAll();
      return failed;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  MutexLock lock(&mu_);
  while (true) {
    if (stopping_) return absl::CancelledError("the job is shutting down");
    Slot& slot = nodes_[node];
    if (slot.generation != generation) {  // a later start took over; follow it
      if (slot.worker != nullptr && !slot.worker->leaving()) return slot.worker;
      if (!slot.starting) return slot.failure.ok() ? absl::UnavailableError(absl::StrCat("the worker on node ", node, " left")) : slot.failure;
    } else if (!slot.starting) {
      if (slot.worker != nullptr) return slot.worker;
      return slot.failure;
    }
    if (cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout && std::chrono::steady_clock::now() >= deadline) {
      if (slot.generation == generation && slot.starting) {
        slot.starting = false;
        slot.failure = absl::DeadlineExceededError(
            absl::StrCat("the worker started on node ", node, " did not connect to this driver within ",
                         options_.start_timeout.count(), " ms (can the node reach ", options_.listen_host, ":",
                         listener_->port(), "? is the executable the same program?)"));
        cv_.NotifyAll();
        return slot.failure;
      }
    }
  }
}

void WorkerPool::AcceptLoop() {
  while (true) {
    // Until a connection proves it is the job's worker, it may send only a Hello's worth: a
    // stranger cannot make this process allocate what a frame header announces.
    absl::StatusOr<std::unique_ptr<FrameSocket>> socket = listener_->Accept(wire::kMaxHandshakeBytes);
    if (!socket.ok()) {
      if (socket.status().code() == absl::StatusCode::kCancelled) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ReapAdmissions(false);
    if (admissions_.size() >= kMaxAdmitting) continue;  // a flood: dropped (closed) unread
    auto done = std::make_shared<std::atomic<bool>>(false);
    admissions_.push_back(Admission{
        .thread = std::thread([this, done, s = *std::move(socket)]() mutable {
          Admit(std::move(s));
          done->store(true);
        }),
        .done = done});
  }
  ReapAdmissions(true);
}

void WorkerPool::ReapAdmissions(bool all) {
  for (auto it = admissions_.begin(); it != admissions_.end();) {
    if (all || it->done->load()) {
      it->thread.join();
      it = admissions_.erase(it);
    } else {
      ++it;
    }
  }
}

void WorkerPool::Admit(std::unique_ptr<FrameSocket> socket) {
  absl::StatusOr<std::string> frame = socket->Receive(std::chrono::milliseconds(2000));
  if (!frame.ok()) return;  // garbage, silence or a closed connection: dropped
  const auto refuse = [&](std::string why) { (void)socket->Send(wire::Encode(wire::Welcome{.refusal = std::move(why)})); };
  // A worker of another gpupool build is told so (it says so where its agent logs it) before
  // anything else of its Hello is read: the rest may mean something else there.
  if (absl::StatusOr<uint64_t> protocol = wire::ProtocolOf(*frame); protocol.ok() && *protocol != wire::kProtocol) {
    refuse(wire::ProtocolMismatch("this worker", *protocol, "its driver"));
    return;
  }
  absl::StatusOr<wire::Hello> hello = wire::DecodeHello(*frame);
  if (!hello.ok()) return;
  wire::Welcome welcome = options_.welcome;
  // Each side proves the job's key (runtime/tasks/job_proof.h): this driver first, so a worker
  // never proves itself to a process that does not hold the key; then the worker.
  absl::StatusOr<std::string> nonce = FreshNonce();
  if (hello->job != options_.job_id || !nonce.ok()) {
    refuse(nonce.ok() ? "this is not that job's driver" : std::string(nonce.status().message()));
    return;
  }
  const std::string& key = options_.launch.secret;
  const std::string own_proof = JobProof(key, ProofRole::kDriver, hello->job, hello->nonce, *nonce);
  if (own_proof.empty()) {
    refuse("this driver could not compute its proof of the job's key (its crypto library failed)");
    return;
  }
  if (!socket->Send(wire::Encode(wire::Challenge{.nonce = *nonce, .proof = own_proof})).ok()) return;
  frame = socket->Receive(std::chrono::milliseconds(2000));
  if (!frame.ok()) return;
  absl::StatusOr<wire::Proof> proof = wire::DecodeProof(*frame);
  if (!proof.ok() || !ProofHolds(proof->proof, key, ProofRole::kWorker, hello->job, hello->nonce, *nonce)) {
    refuse("this connection did not prove it holds the job's worker key");
    return;
  }
  {
    MutexLock lock(&mu_);
    auto it = nodes_.find(hello->node);
    if (stopping_ || it == nodes_.end() || !it->second.starting) {
      refuse(absl::StrCat("this driver did not ask for a worker on node ", hello->node));
      return;
    }
    // Each worker a range of object ids of its own, never reused in the job.
    if (welcomed_ + 1 >= wire::kWorkerIdBase / wire::kWorkerIdSpan) {
      refuse(absl::StrCat("this driver has started ", welcomed_, " workers, all the ranges of object ids it has"));
      return;
    }
    welcome.object_id_base = wire::kWorkerIdBase + ++welcomed_ * wire::kWorkerIdSpan;
  }
  absl::StatusOr<std::string> inventory = options_.describe_node(hello->node);
  if (!inventory.ok()) {
    welcome = wire::Welcome{.refusal = std::string(inventory.status().message())};
  } else {
    welcome.node_inventory = *inventory;
    welcome.pool_now_s = options_.pool_now();
  }
  if (!socket->Send(wire::Encode(welcome)).ok() || !welcome.refusal.empty()) return;
  socket->SetMaxFrame(FrameSocket::kDefaultMaxFrame);  // the job's own worker: batches may be big
  auto worker = std::make_shared<WorkerConnection>(hello->node, hello->pid, welcome.object_id_base, std::move(socket));
  MutexLock lock(&mu_);
  Slot& slot = nodes_[hello->node];
  if (stopping_ || !slot.starting) {
    worker->socket_->Shutdown();
    return;
  }
  slot.starting = false;
  slot.worker = worker;
  all_.push_back(worker);
  worker->reader_ = std::thread([this, worker] { ReadLoop(worker); });
  cv_.NotifyAll();
}

void WorkerPool::ReadLoop(std::shared_ptr<WorkerConnection> worker) {
  absl::Status why;
  bool bye = false;
  while (true) {
    absl::StatusOr<std::string> frame = worker->socket_->Receive();
    if (!frame.ok()) {
      why = frame.status();
      break;
    }
    absl::StatusOr<wire::Kind> kind = wire::KindOf(*frame);
    if (!kind.ok()) {
      why = kind.status();
      break;
    }
    // The frame as its message, handed to its handler when the pool has one; why not, when it
    // does not decode.
    auto deliver = [&](auto decoded, const auto& handler) -> absl::Status {
      if (!decoded.ok()) return decoded.status();
      if (handler) handler(*worker, *std::move(decoded));
      return absl::OkStatus();
    };
    absl::Status bad = absl::OkStatus();
    switch (*kind) {
      case wire::Kind::kOutcomes: bad = deliver(wire::DecodeOutcomes(*frame), options_.on_outcomes); break;
      case wire::Kind::kLog: bad = deliver(wire::DecodeLog(*frame), options_.on_log); break;
      case wire::Kind::kCheckpointed: bad = deliver(wire::DecodeCheckpointed(*frame), options_.on_checkpointed); break;
      case wire::Kind::kFetched: bad = deliver(wire::DecodeFetchedView(*frame), options_.on_fetched); break;
      case wire::Kind::kBorrow: bad = deliver(wire::DecodeBorrow(*frame), options_.on_borrow); break;
      case wire::Kind::kRelease: bad = deliver(wire::DecodeRelease(*frame), options_.on_release); break;
      case wire::Kind::kObjectsAt: bad = deliver(wire::DecodeObjectsAt(*frame), options_.on_objects_at); break;
      case wire::Kind::kSubmit: {
        absl::StatusOr<wire::Submit> submit = wire::DecodeSubmit(*frame);
        if (!submit.ok()) {
          bad = submit.status();
        } else if (options_.on_submit) {
          options_.on_submit(*worker, *std::move(submit));
        } else {  // answered all the same: the submitter must not wait
          worker->PostFrame(wire::Encode(wire::Submitted{.request = submit->request,
                                                         .code = static_cast<int64_t>(ErrorCode::kUnimplemented),
                                                         .message = "this driver takes no tasks from its workers"}));
        }
        break;
      }
      case wire::Kind::kFetch: {
        absl::StatusOr<wire::Fetch> ask = wire::DecodeFetch(*frame);
        if (!ask.ok()) {
          bad = ask.status();
        } else if (options_.on_fetch) {
          options_.on_fetch(*worker, *ask);
        } else {  // answered all the same: the asker must not wait
          worker->PostFrame(wire::Encode(wire::Fetched{.request = ask->request,
                                                       .code = static_cast<int64_t>(ErrorCode::kUnimplemented),
                                                       .message = "this driver serves no objects"}));
        }
        break;
      }
      case wire::Kind::kBye:
        worker->leaving_.store(true);
        bye = true;
        break;
      default:
        bad = absl::DataLossError(absl::StrCat("a worker sent message kind ", static_cast<int>(*kind)));
    }
    if (!bad.ok()) {
      why = bad;
      break;
    }
  }
  worker->leaving_.store(true);
  worker->socket_->Shutdown();  // a bad frame ends the connection too (and any send blocked on it)
  {
    MutexLock lock(&mu_);
    auto it = nodes_.find(worker->node());
    if (it != nodes_.end() && it->second.worker == worker) it->second.worker = nullptr;
  }
  options_.on_lost(*worker, absl::Status(why.code(), absl::StrCat("worker pid ", worker->pid(), " on node ",
                                                                  worker->node(), ": ", why.message())),
                   bye);
  worker->StopSending();  // its sender thread ends; what is still queued could not arrive
}

}  // namespace gpupool::runtime
