#include "runtime/head/remote_pool.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "runtime/head/rpc_connection.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

class RemotePool::Impl {
 public:
  explicit Impl(RemotePoolOptions options) : options_(std::move(options)) {}
  ~Impl();
  absl::Status Start();

  // Any thread.
  absl::Status Request(const pool::LeaseRequest& r, LeaseListener* listener);
  absl::Status Withdraw(const std::string& request_id);
  absl::Status Release(const std::string& lease_id);
  absl::StatusOr<rpc::DiscoveredPool> DescribeNode(const std::string& name);
  bool connected() const { return connection_ != nullptr && connection_->connected(); }
  double Now() const {
    std::chrono::duration<double> real = std::chrono::steady_clock::now() - connected_at_;
    return pool_now_at_connect_ + real.count() * clock_speed_;
  }
  std::map<std::string, LedgerTeam> Ledger() const;

  // Loop thread: the service told a listener something.
  void Granted(pool::Lease lease, LeaseListener* user) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      leases_[lease.id] = Held{user, lease.request.team, static_cast<double>(lease.milli) / 1000.0,
                               lease.borrowing, Now()};
      ++ledger_[lease.request.team].leases;
    }
    Post([user, lease = std::move(lease)] { user->OnGranted(lease); });
  }
  void Revoked(std::string id, pool::RevokeCause cause, double deadline_s, LeaseListener* user) {
    Post([user, id = std::move(id), cause, deadline_s] { user->OnRevoked(id, cause, deadline_s); });
  }
  void Lost(std::string id, std::string why, LeaseListener* user) {
    Close(id);
    Post([user, id = std::move(id), why = std::move(why)] { user->OnLost(id, why); });
  }

  pool::PoolConfig config_;
  double capacity_gpus_ = 0;

 private:
  struct Held {
    LeaseListener* listener;
    std::string team;
    double gpus;
    bool borrowing;
    double started_s;
  };
  void Disconnected(const absl::Status& why);
  void Close(const std::string& lease_id);  // into the ledger
  void Post(std::function<void()> f);
  void CallbackLoop();

  const RemotePoolOptions options_;
  std::unique_ptr<RpcConnection> connection_;
  std::optional<rpc::Session::Client> session_;   // loop thread
  std::thread callback_thread_;
  double pool_now_at_connect_ = 0;
  double clock_speed_ = 1;
  std::chrono::steady_clock::time_point connected_at_;

  mutable std::mutex mu_;
  std::map<std::string, Held> leases_;             // guarded by mu_: granted, not released/lost
  std::map<std::string, LedgerTeam> ledger_;       // guarded by mu_: closed leases (+ counts)
  std::condition_variable cv_;
  std::deque<std::function<void()>> callbacks_;    // guarded by mu_
  bool callbacks_stop_ = false;                    // guarded by mu_
};

namespace {

// The job's listener for one request, as a capability the service calls.
class ListenerImpl final : public rpc::LeaseListener::Server {
 public:
  ListenerImpl(RemotePool::Impl& impl, LeaseListener* user) : impl_(impl), user_(user) {}
  kj::Promise<void> granted(GrantedContext context) override {
    absl::StatusOr<pool::Lease> lease = rpc::DecodeLease(context.getParams().getLease());
    KJ_REQUIRE(lease.ok(), "malformed lease from the pool service", std::string(lease.status().message()));
    impl_.Granted(*std::move(lease), user_);
    return kj::READY_NOW;
  }
  kj::Promise<void> revoked(RevokedContext context) override {
    auto p = context.getParams();
    impl_.Revoked(p.getLeaseId(), rpc::DecodeRevokeCause(p.getCause()), p.getDeadlineS(), user_);
    return kj::READY_NOW;
  }
  kj::Promise<void> lost(LostContext context) override {
    auto p = context.getParams();
    impl_.Lost(p.getLeaseId(), p.getWhy(), user_);
    return kj::READY_NOW;
  }

 private:
  RemotePool::Impl& impl_;
  LeaseListener* user_;
};

}  // namespace

void RemotePool::Impl::Post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (callbacks_stop_) return;
    callbacks_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void RemotePool::Impl::CallbackLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return callbacks_stop_ || !callbacks_.empty(); });
    if (callbacks_stop_) return;
    std::function<void()> f = std::move(callbacks_.front());
    callbacks_.pop_front();
    lock.unlock();
    f();
    lock.lock();
  }
}

void RemotePool::Impl::Close(const std::string& lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  double held = (Now() - it->second.started_s) * it->second.gpus;
  LedgerTeam& team = ledger_[it->second.team];
  team.leased_gpu_s += held;
  if (it->second.borrowing) team.borrowed_gpu_s += held;
  leases_.erase(it);
}

std::map<std::string, LedgerTeam> RemotePool::Impl::Ledger() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, LedgerTeam> out = ledger_;
  double now = Now();
  for (const auto& [id, lease] : leases_) {
    double held = (now - lease.started_s) * lease.gpus;
    out[lease.team].leased_gpu_s += held;
    if (lease.borrowing) out[lease.team].borrowed_gpu_s += held;
  }
  return out;
}

void RemotePool::Impl::Disconnected(const absl::Status& why) {
  std::vector<std::pair<std::string, LeaseListener*>> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, held] : leases_) lost.emplace_back(id, held.listener);
  }
  for (auto& [id, user] : lost) {
    Close(id);
    Post([user = user, id = id] { user->OnLost(id, RpcConnection::kConnectionLost); });
  }
  Post([cb = options_.on_disconnected, why] {
    if (cb) cb(why);
  });
}

absl::Status RemotePool::Impl::Start() {
  callback_thread_ = std::thread([this] { CallbackLoop(); });
  std::string config_yaml;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = options_.host, .port = options_.port,
                           .on_disconnected = [this](const absl::Status& why) { Disconnected(why); }},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.authenticateRequest();
        req.setTeam(options_.team);
        req.setToken(options_.token);
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (!st.ok()) return st;
        session_ = resp.getSession();
        auto info = session_->infoRequest().send().wait(wait).getInfo();
        pool_now_at_connect_ = info.getPoolNowS();
        clock_speed_ = info.getClockSpeed() > 0 ? info.getClockSpeed() : 1.0;
        connected_at_ = std::chrono::steady_clock::now();
        config_yaml = info.getConfigYaml();
        capacity_gpus_ = info.getCapacityGpus();
        return absl::OkStatus();
      });
  if (!c.ok()) return c.status();
  connection_ = *std::move(c);
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
  if (connection_ != nullptr) {
    connection_->Sync([this] { session_.reset(); });  // capabilities die on their loop
    connection_.reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_stop_ = true;
  }
  cv_.notify_all();
  if (callback_thread_.joinable()) callback_thread_.join();
}

absl::Status RemotePool::Impl::Request(const pool::LeaseRequest& r, LeaseListener* listener) {
  if (listener == nullptr) return absl::InvalidArgumentError("a lease request needs a listener");
  return connection_->Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->requestRequest();
    rpc::EncodeLeaseRequest(r, req.initRequest());
    req.setListener(kj::heap<ListenerImpl>(*this, listener));
    return req.send().then([](capnp::Response<rpc::Session::RequestResults>&& resp) {
      return rpc::DecodeStatus(resp.getStatus());
    });
  });
}

absl::Status RemotePool::Impl::Withdraw(const std::string& request_id) {
  return connection_->Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->withdrawRequest();
    req.setRequestId(request_id);
    return req.send().then([](capnp::Response<rpc::Session::WithdrawResults>&& resp) {
      return rpc::DecodeStatus(resp.getStatus());
    });
  });
}

absl::Status RemotePool::Impl::Release(const std::string& lease_id) {
  absl::Status st = connection_->Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->releaseRequest();
    req.setLeaseId(lease_id);
    return req.send().then([](capnp::Response<rpc::Session::ReleaseResults>&& resp) {
      return rpc::DecodeStatus(resp.getStatus());
    });
  });
  if (st.ok() || absl::IsNotFound(st)) Close(lease_id);
  return st;
}

absl::StatusOr<rpc::DiscoveredPool> RemotePool::Impl::DescribeNode(const std::string& name) {
  std::string bytes;
  absl::Status st = connection_->Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->describeNodeRequest();
    req.setName(name);
    return req.send().then([&bytes](capnp::Response<rpc::Session::DescribeNodeResults>&& resp) {
      absl::Status s = rpc::DecodeStatus(resp.getStatus());
      if (s.ok()) bytes.assign(resp.getInventory().asChars().begin(), resp.getInventory().asChars().end());
      return s;
    });
  });
  if (!st.ok()) return st;
  return rpc::DecodeNodes(bytes);
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
absl::Status RemotePool::Withdraw(const std::string& request_id) { return impl_->Withdraw(request_id); }
absl::Status RemotePool::Release(const std::string& lease_id) { return impl_->Release(lease_id); }
double RemotePool::Now() const { return impl_->Now(); }
const pool::PoolConfig& RemotePool::config() const { return impl_->config_; }
double RemotePool::capacity_gpus() const { return impl_->capacity_gpus_; }
std::map<std::string, LedgerTeam> RemotePool::Ledger() const { return impl_->Ledger(); }
absl::StatusOr<rpc::DiscoveredPool> RemotePool::DescribeNode(const std::string& name) {
  return impl_->DescribeNode(name);
}
bool RemotePool::connected() const { return impl_->connected(); }

}  // namespace gpupool::runtime
