// RemotePool is wiring over four parts, each in its own file:
//   PoolLink           (pool_link.h)            one authenticated Cap'n Proto session: the calls
//   RemoteSessionState (remote_session_state.h) what is held, what is pending, where the session stands
//   Reconnector        (reconnector.h)          what to do when the link is lost
//   CallbackThread     (callback_thread.h)      the job's listeners, called in order
//
// Locks and threads. One lock, Impl::mu_, guards the RemoteSessionState; the Reconnector shares it.
// It is never held while calling the head (a PoolLink call can wait for an answer, and the link's
// loop thread takes mu_ to report a grant) nor while posting to the callback thread. Threads:
//   - the job's threads: the PoolClient methods;
//   - each link's loop thread: Granted/Revoked/Lost/Disconnected (PoolLink::Events), and the
//     answers to Submit;
//   - the reconnect thread (Reconnector, with reconnect_for only);
//   - the callback thread: every listener callback and on_disconnected, in the order posted. A
//     lease's callbacks are posted after the state change they report (a grant is in the ledger
//     before OnGranted is posted; a lost lease is closed before OnLost is posted).
#include "runtime/client/remote_pool.h"

#include <chrono>
#include <memory>
#include <utility>

#include "runtime/client/callback_thread.h"
#include "runtime/client/fresh_token.h"
#include "runtime/client/pool_link.h"
#include "runtime/client/reconnector.h"
#include "runtime/client/remote_session_state.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class RemotePool::Impl final : public PoolLink::Events {
 public:
  explicit Impl(RemotePoolOptions options) : options_(std::move(options)) {}
  ~Impl() override;
  // This end of the current connection to the head (RemotePool::LocalHost).
  std::string LocalHost() const {
    std::shared_ptr<PoolLink> link = CurrentLink();
    return link != nullptr ? link->local_host() : std::string();
  }

  // Connects; reads the head's configuration. Once, before any other call.
  absl::Status Start();

  // Any thread.
  absl::Status Request(const pool::LeaseRequest& r, LeaseListener* listener);
  void Submit(const pool::LeaseRequest& r, LeaseListener* listener);
  absl::Status Withdraw(const std::string& request_id);
  absl::Status Release(const std::string& lease_id, double busy_gpu_s = -1);
  void Checkpointed(const std::string& lease_id, const CheckpointNote& note);
  void ForgetCheckpoints(const std::string& task_key);
  absl::StatusOr<rpc::DiscoveredPool> DescribeNode(const std::string& name);
  absl::StatusOr<int> StartWorker(const WorkerLaunch& launch);
  bool connected() const {
    std::shared_ptr<PoolLink> link = CurrentLink();
    return link != nullptr && link->connected();
  }
  uint64_t reconnections() const {
    MutexLock lock(&mu_);
    return state_.reconnections();
  }
  double Now() const {
    MutexLock lock(&mu_);
    return state_.Now();
  }
  std::map<std::string, LedgerTeam> Ledger() const {
    MutexLock lock(&mu_);
    return state_.Ledger();
  }

  // PoolLink::Events: a link's loop thread.
  void Granted(pool::Lease lease, LeaseListener* user) override;
  void Revoked(std::string id, pool::RevokeCause cause, double deadline_s, LeaseListener* user) override {
    callbacks_.Post([user, id = std::move(id), cause, deadline_s] { user->OnRevoked(id, cause, deadline_s); });
  }
  void Lost(std::string id, std::string why, LeaseListener* user) override;
  void Disconnected(const absl::Status& why) override { reconnector_.LinkLost(why); }

  // Constant once Start returns.
  pool::PoolConfig config_;
  double capacity_gpus() const {
    MutexLock lock(&mu_);
    return capacity_gpus_;
  }

 private:
  // Connects and authenticates; reads the head's clock (and, when `config_yaml` is given, its
  // configuration). The caller's thread (Start), then the reconnect thread; without mu_.
  absl::StatusOr<std::shared_ptr<PoolLink>> Dial(std::string* config_yaml);
  // Records `r` as pending (RemoteSessionState::AddPending), after checking it has a listener.
  absl::Status AddPending(const pool::LeaseRequest& r, LeaseListener* listener, std::shared_ptr<PoolLink>* link);
  std::shared_ptr<PoolLink> CurrentLink() const {
    MutexLock lock(&mu_);
    return state_.link();
  }

  // Constant after construction.
  const RemotePoolOptions options_;
  // Made once, presented on every connection: lets this job (and only it) reclaim its leases.
  // Without one (no reconnection, or no random bytes) the head gives its leases back at a loss.
  const std::string job_key_ = options_.reconnect_for.count() > 0 ? FreshToken().value_or("") : std::string();

  mutable Mutex mu_;
  RemoteSessionState state_ ABSL_GUARDED_BY(mu_);
  // The head's, written again at each reconnection (the reconnect thread).
  double capacity_gpus_ ABSL_GUARDED_BY(mu_) = 0;
  CallbackThread callbacks_;
  Reconnector reconnector_{Reconnector::Deps{
      .mu = &mu_,
      .state = &state_,
      .callbacks = &callbacks_,
      .dial = [this] { return Dial(nullptr); },
      .reconnect_for = options_.reconnect_for,
      .on_disconnected = options_.on_disconnected,
  }};
};

void RemotePool::Impl::Granted(pool::Lease lease, LeaseListener* user) {
  {
    MutexLock lock(&mu_);
    state_.Granted(lease, user);
  }
  callbacks_.Post([user, lease = std::move(lease)] { user->OnGranted(lease); });
}

void RemotePool::Impl::Lost(std::string id, std::string why, LeaseListener* user) {
  {
    MutexLock lock(&mu_);
    state_.Close(id);
  }
  callbacks_.Post([user, id = std::move(id), why = std::move(why)] { user->OnLost(id, why); });
}

absl::StatusOr<std::shared_ptr<PoolLink>> RemotePool::Impl::Dial(std::string* config_yaml) {
  PoolLink::HeadInfo head;
  absl::StatusOr<std::unique_ptr<PoolLink>> link = PoolLink::Dial(
      PoolLink::Options{.host = options_.host, .port = options_.port, .team = options_.team,
                        .token = options_.token, .job_key = job_key_, .events = this},
      &head);
  if (!link.ok()) return link.status();
  if (config_yaml != nullptr) *config_yaml = std::move(head.config_yaml);
  MutexLock lock(&mu_);
  state_.SetClock(head.pool_now_s, head.clock_speed);
  capacity_gpus_ = head.capacity_gpus;
  return std::shared_ptr<PoolLink>(*std::move(link));
}

absl::Status RemotePool::Impl::Start() {
  std::string config_yaml;
  absl::StatusOr<std::shared_ptr<PoolLink>> link = Dial(&config_yaml);
  if (!link.ok()) return link.status();
  {
    MutexLock lock(&mu_);
    state_.SetFirstLink(*std::move(link));
  }
  reconnector_.Start();
  if (config_yaml.empty()) {
    config_.scheduling = pool::DefaultSchedulingConfig();
    return absl::OkStatus();
  }
  absl::StatusOr<pool::PoolConfig> config = pool::ParsePoolConfig(config_yaml, "<the head's configuration>");
  if (!config.ok()) return config.status();
  config_ = *std::move(config);
  return absl::OkStatus();
}

RemotePool::Impl::~Impl() {
  std::shared_ptr<PoolLink> link;
  {
    MutexLock lock(&mu_);
    link = state_.Stop();
  }
  // A job that ends says so, after its releases (same ordered queue), so the head gives back at
  // once whatever is left instead of keeping it for a reclaim that will not come.
  if (link != nullptr && !job_key_.empty() && link->connected()) link->Leave(std::chrono::seconds(2));
  reconnector_.Stop();
  link.reset();  // closes the connection: no listener is called after this
  callbacks_.Stop();
}

absl::Status RemotePool::Impl::AddPending(const pool::LeaseRequest& r, LeaseListener* listener,
                                          std::shared_ptr<PoolLink>* link) {
  if (listener == nullptr) return absl::InvalidArgumentError("a lease request needs a listener");
  MutexLock lock(&mu_);
  return state_.AddPending(r, listener, link);
}

absl::Status RemotePool::Impl::Request(const pool::LeaseRequest& r, LeaseListener* listener) {
  std::shared_ptr<PoolLink> link;
  if (absl::Status st = AddPending(r, listener, &link); !st.ok()) return st;
  if (link == nullptr) return absl::OkStatus();  // sent once reconnected
  absl::Status st = link->Request(r, listener);
  if (!st.ok()) {
    MutexLock lock(&mu_);
    if (!state_.Refused(r, st)) return absl::OkStatus();
  }
  return st;
}

void RemotePool::Impl::Submit(const pool::LeaseRequest& r, LeaseListener* listener) {
  std::shared_ptr<PoolLink> link;
  if (absl::Status st = AddPending(r, listener, &link); !st.ok()) {
    if (listener != nullptr) callbacks_.Post([listener, id = r.id, st] { listener->OnRequestFailed(id, st); });
    return;
  }
  if (link == nullptr) return;  // sent once reconnected
  // A connection that fails under the call is not a refusal: the request stays pending, to be
  // sent again after a reconnection or failed when the client gives up (Reconnector).
  link->PostRequest(r, listener, [this, r, listener](const absl::Status& st) {
    if (st.ok()) return;
    bool refused;
    {
      MutexLock lock(&mu_);
      refused = state_.Refused(r, st);
    }
    if (refused) callbacks_.Post([listener, id = r.id, st] { listener->OnRequestFailed(id, st); });
  });
}

absl::Status RemotePool::Impl::Withdraw(const std::string& request_id) {
  std::shared_ptr<PoolLink> link;
  {
    MutexLock lock(&mu_);
    if (absl::Status st = state_.Withdraw(request_id, &link); !st.ok() || link == nullptr) return st;
  }
  return link->Withdraw(request_id);
}

absl::Status RemotePool::Impl::Release(const std::string& lease_id, double busy_gpu_s) {
  std::shared_ptr<PoolLink> link;
  bool held;
  {
    MutexLock lock(&mu_);
    link = state_.link();
    held = state_.Holds(lease_id);
  }
  if (link == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  if (held) {
    {
      MutexLock lock(&mu_);
      // Reconnecting: given back to the restarted head once reclaimed.
      if (state_.ReleaseWhileAway(lease_id)) return absl::OkStatus();
    }
    // A lease this job holds: given back without waiting for the answer (Ray returns leases the
    // same way). The head can refuse only a lease it already took back (lost, revoked past its
    // deadline), which it has told this job about, so nothing is lost by not waiting.
    {
      MutexLock lock(&mu_);
      state_.Close(lease_id);
    }
    link->PostRelease(lease_id, busy_gpu_s);
    return absl::OkStatus();
  }
  // Not one of this job's leases (given back already, or never granted to it): the head says
  // why (NotFound, PermissionDenied).
  absl::Status st = link->Release(lease_id);
  if (st.ok() || absl::IsNotFound(st)) {
    MutexLock lock(&mu_);
    state_.Close(lease_id);
  }
  return st;
}

void RemotePool::Impl::Checkpointed(const std::string& lease_id, const CheckpointNote& note) {
  std::shared_ptr<PoolLink> link;
  {
    MutexLock lock(&mu_);
    if (!state_.Holds(lease_id)) return;  // given back or lost meanwhile
    link = state_.link();
  }
  if (link == nullptr) return;  // given up: the lease is lost anyway
  // Sent in order with the job's other calls, without waiting for the answer (the head refuses
  // only a lease it already took back, which this job has been told about).
  link->PostCheckpointed(lease_id, note);
}

void RemotePool::Impl::ForgetCheckpoints(const std::string& task_key) {
  std::shared_ptr<PoolLink> link = CurrentLink();
  if (link == nullptr) return;
  link->PostForgetCheckpoints(task_key);
}

absl::StatusOr<rpc::DiscoveredPool> RemotePool::Impl::DescribeNode(const std::string& name) {
  std::shared_ptr<PoolLink> link = CurrentLink();
  if (link == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  return link->DescribeNode(name);
}

absl::StatusOr<int> RemotePool::Impl::StartWorker(const WorkerLaunch& launch) {
  // Not queued for a reconnection: a worker is wanted for a lease, which a lost connection has
  // lost too; the job asks again for the leases it is granted next.
  std::shared_ptr<PoolLink> link = CurrentLink();
  if (link == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  return link->StartWorker(launch);
}

absl::StatusOr<std::unique_ptr<RemotePool>> RemotePool::Connect(const RemotePoolOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  absl::Status st = impl->Start();
  if (!st.ok()) return st;
  return std::unique_ptr<RemotePool>(new RemotePool(std::move(impl)));
}

RemotePool::RemotePool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemotePool::~RemotePool() = default;
absl::Status RemotePool::Request(pool::LeaseRequest request, LeaseListener* listener) {
  return impl_->Request(request, listener);
}
void RemotePool::Submit(pool::LeaseRequest request, LeaseListener* listener) { impl_->Submit(request, listener); }
absl::Status RemotePool::Withdraw(const std::string& request_id) { return impl_->Withdraw(request_id); }
absl::Status RemotePool::Release(const std::string& lease_id) { return impl_->Release(lease_id); }
absl::Status RemotePool::ReleaseUsed(const std::string& lease_id, double busy_gpu_s) {
  return impl_->Release(lease_id, busy_gpu_s);
}
void RemotePool::Checkpointed(const std::string& lease_id, const CheckpointNote& note) {
  impl_->Checkpointed(lease_id, note);
}
void RemotePool::ForgetCheckpoints(const std::string& task_key) { impl_->ForgetCheckpoints(task_key); }
double RemotePool::Now() const { return impl_->Now(); }
const pool::PoolConfig& RemotePool::config() const { return impl_->config_; }
double RemotePool::capacity_gpus() const { return impl_->capacity_gpus(); }
std::map<std::string, LedgerTeam> RemotePool::Ledger() const { return impl_->Ledger(); }
absl::StatusOr<rpc::DiscoveredPool> RemotePool::DescribeNode(const std::string& name) {
  return impl_->DescribeNode(name);
}
absl::StatusOr<int> RemotePool::StartWorker(const WorkerLaunch& launch) { return impl_->StartWorker(launch); }
bool RemotePool::connected() const { return impl_->connected(); }
std::string RemotePool::LocalHost() const { return impl_->LocalHost(); }
uint64_t RemotePool::reconnections() const { return impl_->reconnections(); }

}  // namespace gpupool::runtime
