#include "runtime/head/pool_server.h"

#include <atomic>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {
namespace {

// A listener call from the pool's thread, waiting for the event loop.
struct PoolEvent {
  enum Kind { kGranted, kRevoked, kLost } kind;
  pool::Lease lease;       // kGranted
  std::string lease_id;
  pool::RevokeCause cause = pool::RevokeCause::kReclaim;
  double deadline_s = 0;
  std::string why;
};

// One accepted TCP connection with its own two-party RPC system. Messages are read with the
// traversal limit of lease_codec.h, so a peer cannot make the server allocate without bound.
struct Connection {
  Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap,
             capnp::ReaderOptions options)
      : stream(kj::mv(s)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER, options),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

}  // namespace

class SessionImpl;

// Everything the server's event loop owns. The pool calls the LeaseListener methods on its own
// thread; they only queue. All other members are touched on the loop thread only, except where
// noted.
class PoolServer::Impl : public LeaseListener, private kj::TaskSet::ErrorHandler {
 public:
  Impl(std::unique_ptr<EmbeddedPool> pool, PoolServerOptions options)
      : pool_(std::move(pool)), options_(std::move(options)) {}
  ~Impl() noexcept override;

  absl::Status Start();

  // LeaseListener: the pool's thread.
  void OnGranted(const pool::Lease& lease) override {
    Push(PoolEvent{.kind = PoolEvent::kGranted, .lease = lease, .lease_id = lease.id});
  }
  void OnRevoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) override {
    Push(PoolEvent{.kind = PoolEvent::kRevoked, .lease_id = lease_id, .cause = cause, .deadline_s = deadline_s});
  }
  void OnLost(const std::string& lease_id, const std::string& why) override {
    Push(PoolEvent{.kind = PoolEvent::kLost, .lease_id = lease_id, .why = why});
  }

  // Loop thread only.
  absl::Status Authenticate(const std::string& team, const std::string& token) const;
  uint64_t NextSessionNumber() { return next_session_++; }
  EmbeddedPool& pool() { return *pool_; }
  std::map<std::string, SessionImpl*>& by_request() { return by_request_; }
  std::map<std::string, SessionImpl*>& by_lease() { return by_lease_; }

  // Constant after Start.
  std::unique_ptr<EmbeddedPool> pool_;
  PoolServerOptions options_;
  uint16_t port_ = 0;
  std::atomic<uint64_t> accepted_{0};

 private:
  void Run(std::promise<absl::Status>& started);
  void Push(PoolEvent e);
  kj::Promise<void> PumpEvents();
  void Handle(PoolEvent& e);
  kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks);
  void taskFailed(kj::Exception&& e) override {
    if (e.getType() != kj::Exception::Type::DISCONNECTED) {
      std::fprintf(stderr, "gpupool head: connection task failed: %s\n", e.getDescription().cStr());
    }
  }

  std::thread thread_;
  kj::Own<const kj::Executor> executor_;           // set before Start returns
  kj::Own<kj::PromiseFulfiller<void>> stop_;       // loop thread; fulfilled via executor_
  kj::Maybe<capnp::Capability::Client> bootstrap_;  // loop thread

  std::mutex queue_mu_;
  std::deque<PoolEvent> queue_;                                // guarded by queue_mu_
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake_;        // guarded by queue_mu_
  bool queue_closed_ = false;                                  // guarded by queue_mu_

  // Loop thread only: who holds each pool request and lease.
  uint64_t next_session_ = 1;
  std::map<std::string, SessionImpl*> by_request_;
  std::map<std::string, SessionImpl*> by_lease_;
};

// A team's session. Pool request ids are the job's ids prefixed with "s<N>/", so that jobs
// cannot collide or name each other's requests.
class SessionImpl final : public rpc::Session::Server {
 public:
  SessionImpl(PoolServer::Impl& server, std::string team)
      : server_(server), team_(std::move(team)),
        prefix_(absl::StrCat("s", server.NextSessionNumber(), "/")) {}

  ~SessionImpl() {
    // The job is gone: what it asked for goes back to the pool. A grant already queued for a
    // withdrawn request finds no session and is released by the server.
    for (auto& [id, p] : pending_) {
      server_.by_request().erase(id);
      (void)server_.pool().Withdraw(id);
    }
    for (auto& [id, listener] : leases_) {
      server_.by_lease().erase(id);
      (void)server_.pool().Release(id);
    }
  }

  kj::Promise<void> request(RequestContext context) override {
    auto params = context.getParams();
    absl::Status st = DoRequest(params.getRequest(), params.getListener());
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> withdraw(WithdrawContext context) override {
    absl::Status st;
    capnp::Text::Reader id = context.getParams().getRequestId();
    std::string pool_id = prefix_ + std::string(id.cStr(), id.size());
    auto it = pending_.find(pool_id);
    if (it == pending_.end()) {
      st = absl::NotFoundError(absl::StrCat("request '", id.cStr(), "' is not pending in this session"));
    } else {
      st = server_.pool().Withdraw(pool_id);
      pending_.erase(it);
      server_.by_request().erase(pool_id);
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> release(ReleaseContext context) override {
    absl::Status st;
    std::string id = context.getParams().getLeaseId();
    auto it = leases_.find(id);
    if (it == leases_.end()) {
      auto other = server_.by_lease().find(id);
      st = other != server_.by_lease().end()
               ? absl::PermissionDeniedError(absl::StrCat("lease '", id, "' is not held by this session"))
               : absl::NotFoundError(absl::StrCat("lease '", id, "' is not held"));
    } else {
      st = server_.pool().Release(id);
      leases_.erase(it);
      server_.by_lease().erase(id);
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  // Called by the server's event pump (loop thread).
  void Granted(pool::Lease lease) {
    auto it = pending_.find(lease.request.id);
    if (it == pending_.end()) return;
    Pending p = std::move(it->second);
    pending_.erase(it);
    server_.by_request().erase(lease.request.id);
    server_.by_lease()[lease.id] = this;
    lease.request.id = p.client_id;
    auto req = p.listener.grantedRequest();
    rpc::EncodeLease(lease, req.initLease());
    req.send().detach([](kj::Exception&&) {});  // a gone job is cleaned up when its session ends
    leases_.emplace(lease.id, std::move(p.listener));
  }
  void Revoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) {
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return;
    auto req = it->second.revokedRequest();
    req.setLeaseId(lease_id);
    req.setCause(rpc::EncodeRevokeCause(cause));
    req.setDeadlineS(deadline_s);
    req.send().detach([](kj::Exception&&) {});
  }
  void Lost(const std::string& lease_id, const std::string& why) {
    auto it = leases_.find(lease_id);
    if (it == leases_.end()) return;
    auto req = it->second.lostRequest();
    req.setLeaseId(lease_id);
    req.setWhy(why);
    req.send().detach([](kj::Exception&&) {});
    leases_.erase(it);
    server_.by_lease().erase(lease_id);
  }

 private:
  struct Pending {
    std::string client_id;
    rpc::LeaseListener::Client listener;
  };

  absl::Status DoRequest(rpc::LeaseRequest::Reader wire, rpc::LeaseListener::Client listener) {
    absl::StatusOr<pool::LeaseRequest> r = rpc::DecodeLeaseRequest(wire);
    if (!r.ok()) return r.status();
    if (r->id.empty()) return absl::InvalidArgumentError("the request has no id");
    if (r->team.empty()) r->team = team_;
    if (r->team != team_) {
      return absl::PermissionDeniedError(absl::StrCat(
          "this session is team '", team_, "'; it cannot request for team '", r->team, "'"));
    }
    std::string client_id = r->id;
    r->id = prefix_ + client_id;
    if (pending_.count(r->id)) {
      return absl::AlreadyExistsError(absl::StrCat("request '", client_id, "' is already pending"));
    }
    std::string pool_id = r->id;
    // Registered first: the grant is handled on this thread, after this call returns.
    pending_.emplace(pool_id, Pending{client_id, kj::mv(listener)});
    server_.by_request()[pool_id] = this;
    absl::Status st = server_.pool().Request(*std::move(r), &server_);
    if (!st.ok()) {
      pending_.erase(pool_id);
      server_.by_request().erase(pool_id);
    }
    return st;
  }

  PoolServer::Impl& server_;
  const std::string team_;
  const std::string prefix_;
  std::map<std::string, Pending> pending_;                     // by pool request id
  std::map<std::string, rpc::LeaseListener::Client> leases_;   // by lease id
};

namespace {

class PoolServiceImpl final : public rpc::PoolService::Server {
 public:
  explicit PoolServiceImpl(PoolServer::Impl& server) : server_(server) {}
  kj::Promise<void> authenticate(AuthenticateContext context) override {
    auto params = context.getParams();
    absl::Status st;
    if (params.getTeam().size() > rpc::kMaxTextBytes || params.getToken().size() > rpc::kMaxTextBytes) {
      st = absl::InvalidArgumentError("team or token is longer than 4096 bytes");
    } else {
      st = server_.Authenticate(params.getTeam(), params.getToken());
    }
    auto results = context.getResults();
    rpc::EncodeStatus(st, results.initStatus());
    if (st.ok()) results.setSession(kj::heap<SessionImpl>(server_, params.getTeam()));
    return kj::READY_NOW;
  }

 private:
  PoolServer::Impl& server_;
};

bool SameToken(const std::string& a, const std::string& b) {
  // Compares every byte, so the time taken does not tell how much of a guess was right.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i % (a.size() + 1)] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status PoolServer::Impl::Authenticate(const std::string& team, const std::string& token) const {
  auto it = options_.team_tokens.find(team);
  if (it == options_.team_tokens.end()) {
    return absl::UnauthenticatedError(absl::StrCat("team '", team, "' is not known to this pool"));
  }
  if (!SameToken(token, it->second)) {
    return absl::UnauthenticatedError(absl::StrCat("wrong token for team '", team, "'"));
  }
  return absl::OkStatus();
}

void PoolServer::Impl::Push(PoolEvent e) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (queue_closed_) return;
  queue_.push_back(std::move(e));
  if (wake_) {
    wake_->fulfill();
    wake_ = nullptr;
  }
}

kj::Promise<void> PoolServer::Impl::PumpEvents() {
  std::deque<PoolEvent> batch;
  kj::Maybe<kj::Promise<void>> wait;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    batch.swap(queue_);
    if (batch.empty()) {
      auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
      wake_ = kj::mv(paf.fulfiller);
      wait = kj::mv(paf.promise);
    }
  }
  for (PoolEvent& e : batch) Handle(e);
  KJ_IF_MAYBE(w, wait) {
    return w->then([this] { return PumpEvents(); });
  }
  return kj::evalLater([this] { return PumpEvents(); });
}

void PoolServer::Impl::Handle(PoolEvent& e) {
  if (e.kind == PoolEvent::kGranted) {
    auto it = by_request_.find(e.lease.request.id);
    if (it == by_request_.end()) {
      (void)pool_->Release(e.lease.id);  // its session ended, or it was withdrawn meanwhile
      return;
    }
    it->second->Granted(std::move(e.lease));
    return;
  }
  auto it = by_lease_.find(e.lease_id);
  if (it == by_lease_.end()) return;
  if (e.kind == PoolEvent::kRevoked) {
    it->second->Revoked(e.lease_id, e.cause, e.deadline_s);
  } else {
    it->second->Lost(e.lease_id, e.why);
  }
}

kj::Promise<void> PoolServer::Impl::AcceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks) {
  return listener.accept().then([this, &listener, &tasks](kj::Own<kj::AsyncIoStream>&& stream) {
    accepted_.fetch_add(1);
    capnp::ReaderOptions options;
    options.traversalLimitInWords = rpc::kMaxMessageWords;
    options.nestingLimit = 16;
    auto c = kj::heap<Connection>(kj::mv(stream), KJ_ASSERT_NONNULL(bootstrap_), options);
    kj::Promise<void> done = c->network.onDisconnect();
    tasks.add(done.attach(kj::mv(c)));
    return AcceptLoop(listener, tasks);
  });
}

void PoolServer::Impl::Run(std::promise<absl::Status>& started) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<kj::ConnectionReceiver> listener;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
    auto addr = io.provider->getNetwork().parseAddress(options_.address, options_.port).wait(io.waitScope);
    listener = addr->listen();
  })) {
    started.set_value(absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options_.address, ":", options_.port, ": ", e->getDescription().cStr())));
    return;
  }
  port_ = static_cast<uint16_t>(listener->getPort());
  executor_ = kj::getCurrentThreadExecutor().addRef();
  auto stop = kj::newPromiseAndFulfiller<void>();
  stop_ = kj::mv(stop.fulfiller);
  bootstrap_ = capnp::Capability::Client(kj::heap<PoolServiceImpl>(*this));
  {
    kj::TaskSet tasks(*this);
    tasks.add(AcceptLoop(*listener, tasks));
    tasks.add(PumpEvents());
    started.set_value(absl::OkStatus());
    stop.promise.wait(io.waitScope);
  }  // connections close here; their sessions give back what they held
  bootstrap_ = nullptr;
  std::lock_guard<std::mutex> lock(queue_mu_);
  queue_closed_ = true;
  queue_.clear();
  wake_ = nullptr;
}

absl::Status PoolServer::Impl::Start() {
  for (const char* ok : {"127.0.0.1", "localhost", "::1"}) {
    if (options_.address == ok) goto loopback;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the pool server binds only to loopback for now; got '", options_.address, "'"));
loopback:
  std::promise<absl::Status> started;
  std::future<absl::Status> result = started.get_future();
  thread_ = std::thread([this, &started] { Run(started); });
  absl::Status st = result.get();
  if (!st.ok()) {
    thread_.join();
  }
  return st;
}

PoolServer::Impl::~Impl() noexcept {
  if (thread_.joinable()) {
    executor_->executeSync([this] { stop_->fulfill(); });
    thread_.join();
  }
  pool_.reset();  // stops the pool's thread: no listener call reaches this object afterwards
}

absl::StatusOr<std::unique_ptr<PoolServer>> PoolServer::Start(std::unique_ptr<EmbeddedPool> pool,
                                                              const PoolServerOptions& options) {
  if (pool == nullptr) return absl::InvalidArgumentError("no pool to serve");
  auto impl = std::make_unique<Impl>(std::move(pool), options);
  absl::Status st = impl->Start();
  if (!st.ok()) return st;
  return std::unique_ptr<PoolServer>(new PoolServer(std::move(impl)));
}

PoolServer::PoolServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PoolServer::~PoolServer() = default;
uint16_t PoolServer::port() const { return impl_->port_; }
EmbeddedPool& PoolServer::pool() { return *impl_->pool_; }
uint64_t PoolServer::connections_accepted() const { return impl_->accepted_.load(); }

}  // namespace gpupool::runtime
