#include "runtime/head/remote_pool.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {
namespace {

// The KJ exception kinds, as what the caller should do (STYLE 5, 9).
absl::Status FromKj(const kj::Exception& e) {
  std::string what = absl::StrCat("pool service: ", e.getDescription().cStr());
  switch (e.getType()) {
    case kj::Exception::Type::DISCONNECTED: return absl::UnavailableError(what);
    case kj::Exception::Type::OVERLOADED: return absl::ResourceExhaustedError(what);
    case kj::Exception::Type::UNIMPLEMENTED: return absl::UnimplementedError(what);
    default: return absl::InternalError(what);
  }
}

constexpr char kConnectionLost[] = "the connection to the pool service was lost";

}  // namespace

class RemotePool::Impl {
 public:
  explicit Impl(RemotePoolOptions options) : options_(std::move(options)) {}
  ~Impl();
  absl::Status Start();

  // Any thread.
  absl::Status Request(const pool::LeaseRequest& r, LeaseListener* listener);
  absl::Status Withdraw(const std::string& request_id);
  absl::Status Release(const std::string& lease_id);
  bool connected() const { return !disconnected_.load(); }

  // Loop thread: the service told a listener something.
  void Granted(pool::Lease lease, LeaseListener* user) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      leases_[lease.id] = user;
    }
    Post([user, lease = std::move(lease)] { user->OnGranted(lease); });
  }
  void Revoked(std::string id, pool::RevokeCause cause, double deadline_s, LeaseListener* user) {
    Post([user, id = std::move(id), cause, deadline_s] { user->OnRevoked(id, cause, deadline_s); });
  }
  void Lost(std::string id, std::string why, LeaseListener* user) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      leases_.erase(id);
    }
    Post([user, id = std::move(id), why = std::move(why)] { user->OnLost(id, why); });
  }

 private:
  void Run(std::promise<absl::Status>& started);
  void Disconnected(absl::Status why);
  void Post(std::function<void()> f);
  void CallbackLoop();
  template <typename F>
  absl::Status Call(F&& f);

  const RemotePoolOptions options_;
  std::thread loop_thread_;
  std::thread callback_thread_;
  kj::Own<const kj::Executor> executor_;          // set before Start returns
  kj::Own<kj::PromiseFulfiller<void>> stop_;      // loop thread
  std::optional<rpc::Session::Client> session_;   // loop thread
  std::atomic<bool> stopping_{false};
  std::atomic<bool> disconnected_{false};

  std::mutex mu_;
  std::map<std::string, LeaseListener*> leases_;   // guarded by mu_: granted, not released/lost
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

void RemotePool::Impl::Disconnected(absl::Status why) {
  if (stopping_.load() || disconnected_.exchange(true)) return;
  std::map<std::string, LeaseListener*> leases;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leases.swap(leases_);
  }
  for (auto& [id, user] : leases) {
    Post([user = user, id = id] { user->OnLost(id, kConnectionLost); });
  }
  Post([cb = options_.on_disconnected, why = std::move(why)] {
    if (cb) cb(why);
  });
}

void RemotePool::Impl::Run(std::promise<absl::Status>& started) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::AsyncIoStream> stream;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
    auto addr = io.provider->getNetwork().parseAddress(options_.host, options_.port).wait(io.waitScope);
    stream = addr->connect().wait(io.waitScope);
  })) {
    started.set_value(absl::UnavailableError(absl::StrCat(
        "cannot reach the pool service at ", options_.host, ":", options_.port, ": ",
        e->getDescription().cStr())));
    return;
  }
  capnp::ReaderOptions reader;
  reader.traversalLimitInWords = rpc::kMaxMessageWords;
  reader.nestingLimit = 16;
  capnp::TwoPartyVatNetwork network(*stream, capnp::rpc::twoparty::Side::CLIENT, reader);
  auto system = capnp::makeRpcClient(network);
  absl::Status st;
  {
    capnp::MallocMessageBuilder vat;
    auto id = vat.initRoot<capnp::rpc::twoparty::VatId>();
    id.setSide(capnp::rpc::twoparty::Side::SERVER);
    auto service = system.bootstrap(id).castAs<rpc::PoolService>();
    auto req = service.authenticateRequest();
    req.setTeam(options_.team);
    req.setToken(options_.token);
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
      auto resp = req.send().wait(io.waitScope);
      st = rpc::DecodeStatus(resp.getStatus());
      if (st.ok()) session_ = resp.getSession();
    })) {
      st = FromKj(*e);
    }
  }
  if (!st.ok()) {
    started.set_value(st);
    return;
  }
  executor_ = kj::getCurrentThreadExecutor().addRef();
  auto stop = kj::newPromiseAndFulfiller<void>();
  stop_ = kj::mv(stop.fulfiller);
  kj::Promise<void> watch = network.onDisconnect()
      .then([this] { Disconnected(absl::UnavailableError(kConnectionLost)); },
            [this](kj::Exception&& e) { Disconnected(FromKj(e)); })
      .eagerlyEvaluate(nullptr);
  started.set_value(absl::OkStatus());
  stop.promise.wait(io.waitScope);
  session_.reset();
}

absl::Status RemotePool::Impl::Start() {
  callback_thread_ = std::thread([this] { CallbackLoop(); });
  std::promise<absl::Status> started;
  std::future<absl::Status> result = started.get_future();
  loop_thread_ = std::thread([this, &started] { Run(started); });
  absl::Status st = result.get();
  if (!st.ok()) loop_thread_.join();
  return st;
}

RemotePool::Impl::~Impl() {
  stopping_.store(true);
  if (loop_thread_.joinable()) {
    executor_->executeSync([this] { stop_->fulfill(); });
    loop_thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_stop_ = true;
  }
  cv_.notify_all();
  if (callback_thread_.joinable()) callback_thread_.join();
}

template <typename F>
absl::Status RemotePool::Impl::Call(F&& f) {
  if (disconnected_.load()) return absl::UnavailableError(kConnectionLost);
  absl::Status out;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { out = executor_->executeSync(std::forward<F>(f)); })) {
    return FromKj(*e);
  }
  return out;
}

absl::Status RemotePool::Impl::Request(const pool::LeaseRequest& r, LeaseListener* listener) {
  if (listener == nullptr) return absl::InvalidArgumentError("a lease request needs a listener");
  return Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->requestRequest();
    rpc::EncodeLeaseRequest(r, req.initRequest());
    req.setListener(kj::heap<ListenerImpl>(*this, listener));
    return req.send().then([](capnp::Response<rpc::Session::RequestResults>&& resp) {
      return rpc::DecodeStatus(resp.getStatus());
    });
  });
}

absl::Status RemotePool::Impl::Withdraw(const std::string& request_id) {
  return Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->withdrawRequest();
    req.setRequestId(request_id);
    return req.send().then([](capnp::Response<rpc::Session::WithdrawResults>&& resp) {
      return rpc::DecodeStatus(resp.getStatus());
    });
  });
}

absl::Status RemotePool::Impl::Release(const std::string& lease_id) {
  absl::Status st = Call([&]() -> kj::Promise<absl::Status> {
    auto req = session_->releaseRequest();
    req.setLeaseId(lease_id);
    return req.send().then([](capnp::Response<rpc::Session::ReleaseResults>&& resp) {
      return rpc::DecodeStatus(resp.getStatus());
    });
  });
  if (st.ok() || absl::IsNotFound(st)) {
    std::lock_guard<std::mutex> lock(mu_);
    leases_.erase(lease_id);
  }
  return st;
}

absl::StatusOr<std::unique_ptr<RemotePool>> RemotePool::Connect(const RemotePoolOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  absl::Status st = impl->Start();
  if (!st.ok()) return st;
  return std::unique_ptr<RemotePool>(new RemotePool(std::move(impl)));
}

RemotePool::RemotePool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemotePool::~RemotePool() = default;
absl::Status RemotePool::Request(const pool::LeaseRequest& request, LeaseListener* listener) {
  return impl_->Request(request, listener);
}
absl::Status RemotePool::Withdraw(const std::string& request_id) { return impl_->Withdraw(request_id); }
absl::Status RemotePool::Release(const std::string& lease_id) { return impl_->Release(lease_id); }
bool RemotePool::connected() const { return impl_->connected(); }

}  // namespace gpupool::runtime
