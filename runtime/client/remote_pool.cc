#include "runtime/client/remote_pool.h"

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
#include "runtime/client/fresh_token.h"
#include "runtime/client/lease_book.h"
#include "runtime/rpc/rpc_connection.h"
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
  void Submit(const pool::LeaseRequest& r, LeaseListener* listener);
  absl::Status Withdraw(const std::string& request_id);
  absl::Status Release(const std::string& lease_id);
  void Checkpointed(const std::string& lease_id, const CheckpointNote& note);
  void ForgetCheckpoints(const std::string& task_key);
  absl::StatusOr<rpc::DiscoveredPool> DescribeNode(const std::string& name);
  bool connected() const {
    std::shared_ptr<Link> link = CurrentLink();
    return link != nullptr && link->connection->connected();
  }
  uint64_t reconnections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reconnections_;
  }
  double Now() const {
    std::lock_guard<std::mutex> lock(mu_);
    return NowLocked();
  }
  std::map<std::string, LedgerTeam> Ledger() const;

  // Loop thread: the service told a listener something.
  void Granted(pool::Lease lease, LeaseListener* user) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.erase(lease.request.id);
      leases_.Open(lease.id, LeaseBook::Lease{user, lease.request.team, static_cast<double>(lease.milli) / 1000.0,
                                              lease.borrowing, NowLocked()});
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
  // One connection to the head and the session authenticated on it. The session is a
  // capability of the connection's loop, so it is dropped there before the connection closes.
  struct Link {
    std::unique_ptr<RpcConnection> connection;
    std::optional<rpc::Session::Client> session;  // the connection's loop thread
    // One capability per job listener, sent with each of its requests (the connection's loop
    // thread): the head then holds one import for it instead of one per request, and does not
    // send a Release message each time a lease ends.
    std::map<LeaseListener*, rpc::LeaseListener::Client> listeners;
    // How long the head keeps this job's leases for it to reclaim after the connection is lost
    // (a restart, or a lost connection; 0: it does not, without a journal or a job key).
    std::chrono::milliseconds reclaim_window{0};
    rpc::LeaseListener::Client ListenerFor(RemotePool::Impl& impl, LeaseListener* user);
    ~Link() {
      if (connection != nullptr) {
        connection->Sync([this] {
          session.reset();
          listeners.clear();
        });
      }
    }
  };
  struct Pending {  // accepted, not granted yet: reclaimed, or sent again, after a reconnection
    pool::LeaseRequest request;
    LeaseListener* listener;
  };
  // Connects and authenticates; reads the head's clock (and, the first time, its configuration).
  absl::StatusOr<std::shared_ptr<Link>> Dial(std::string* config_yaml);
  std::shared_ptr<Link> CurrentLink() const {
    std::lock_guard<std::mutex> lock(mu_);
    return link_;
  }
  absl::Status SendRequest(Link& link, const pool::LeaseRequest& r, LeaseListener* listener);
  // The calls themselves, made on the link's loop thread while its session is there.
  kj::Promise<absl::Status> RequestOn(Link& link, const pool::LeaseRequest& r, LeaseListener* listener);
  static kj::Promise<absl::Status> ReleaseOn(Link& link, const std::string& lease_id);
  static kj::Promise<absl::Status> WithdrawOn(Link& link, const std::string& request_id);
  // A request's answer (loop thread): its status, and the grant when it carries one.
  absl::Status Answered(const capnp::Response<rpc::Session::RequestResults>& resp, LeaseListener* listener);
  // Records `r` as pending unless it is already; false (and why) when it cannot be sent. Sets
  // `link` to the connection to send it on, or null while reconnecting (then it waits there).
  absl::Status AddPending(const pool::LeaseRequest& r, LeaseListener* listener, std::shared_ptr<Link>* link);
  // The service refused `r` (or the call failed): forget it, unless a reconnection will send it.
  // True when the caller should report `st`.
  bool Refused(const pool::LeaseRequest& r, const absl::Status& st);
  double NowLocked() const {
    std::chrono::duration<double> real = std::chrono::steady_clock::now() - connected_at_;
    return pool_now_at_connect_ + real.count() * clock_speed_;
  }
  void Disconnected(const absl::Status& why);  // a connection's loop thread
  void Reconnect();                            // the reconnect thread
  // Reports the leases this job holds (those in `only` when given, but not those in `except`)
  // lost with `why`.
  void LoseHeldLeases(const std::string& why, const std::set<std::string>* only = nullptr,
                      const std::set<std::string>& except = {});
  // On a fresh link after a loss: asks for the leases `held` through it (and those given back
  // meanwhile, which it then releases), and for the requests still `waiting`. Returns the leases
  // it asked for and those it holds now (kept), and the requests the head still has for it
  // (queued, or granted meanwhile: not to be sent again). kept and queued are empty when the
  // call failed.
  struct Reclaimed {
    std::set<std::string> held, kept;
    std::set<std::string> queued;
  };
  Reclaimed Reclaim(Link& link, const std::vector<std::pair<std::string, LeaseListener*>>& held,
                    std::vector<std::string> given_back, const std::vector<Pending>& waiting);
  void GiveUp(const absl::Status& why);
  void Close(const std::string& lease_id);  // into the ledger
  void Post(std::function<void()> f);
  void CallbackLoop();

  const RemotePoolOptions options_;
  std::thread callback_thread_;
  std::thread reconnect_thread_;

  mutable std::mutex mu_;
  std::shared_ptr<Link> link_;                     // guarded by mu_; null once given up
  double pool_now_at_connect_ = 0;                 // guarded by mu_
  double clock_speed_ = 1;                         // guarded by mu_
  std::chrono::steady_clock::time_point connected_at_;  // guarded by mu_
  LeaseBook leases_;                               // guarded by mu_: this job's leases and their cost
  std::map<std::string, Pending> pending_;         // guarded by mu_: by the job's request id
  std::condition_variable cv_;
  std::deque<std::function<void()>> callbacks_;    // guarded by mu_
  bool callbacks_stop_ = false;                    // guarded by mu_
  // Reconnection, guarded by mu_: a loss seen, waiting for the reconnect thread; or given up.
  bool link_lost_ = false;
  std::vector<std::string> released_while_away_;  // leases given back while reconnecting
  // While reconnecting: until when the head keeps this job's leases (its reclaim window).
  std::chrono::steady_clock::time_point keep_leases_until_;
  // Made once, presented on every connection: lets this job (and only it) reclaim its leases.
  // Without one (no reconnection, or no random bytes) the head gives its leases back at a loss.
  const std::string job_key_ = options_.reconnect_for.count() > 0 ? FreshToken().value_or("") : std::string();
  absl::Status lost_why_;
  bool gave_up_ = false;
  bool stopping_ = false;
  uint64_t reconnections_ = 0;
  std::condition_variable reconnect_cv_;
};

namespace {

// The job's listener for one request, as a capability the service calls. A null `user` (a lease
// given back while reconnecting, reclaimed only to be released) hears nothing.
class ListenerImpl final : public rpc::LeaseListener::Server {
 public:
  ListenerImpl(RemotePool::Impl& impl, LeaseListener* user) : impl_(impl), user_(user) {}
  kj::Promise<void> granted(GrantedContext context) override {
    if (user_ == nullptr) return kj::READY_NOW;
    absl::StatusOr<pool::Lease> lease = rpc::DecodeLease(context.getParams().getLease());
    KJ_REQUIRE(lease.ok(), "malformed lease from the pool service", std::string(lease.status().message()));
    impl_.Granted(*std::move(lease), user_);
    return kj::READY_NOW;
  }
  kj::Promise<void> revoked(RevokedContext context) override {
    if (user_ == nullptr) return kj::READY_NOW;
    auto p = context.getParams();
    impl_.Revoked(p.getLeaseId(), rpc::DecodeRevokeCause(p.getCause()), p.getDeadlineS(), user_);
    return kj::READY_NOW;
  }
  kj::Promise<void> lost(LostContext context) override {
    if (user_ == nullptr) return kj::READY_NOW;
    auto p = context.getParams();
    impl_.Lost(p.getLeaseId(), p.getWhy(), user_);
    return kj::READY_NOW;
  }

 private:
  RemotePool::Impl& impl_;
  LeaseListener* user_;
};

}  // namespace

rpc::LeaseListener::Client RemotePool::Impl::Link::ListenerFor(RemotePool::Impl& impl, LeaseListener* user) {
  auto it = listeners.find(user);
  if (it == listeners.end()) {
    it = listeners.emplace(user, rpc::LeaseListener::Client(kj::heap<ListenerImpl>(impl, user))).first;
  }
  return it->second;
}

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
  leases_.Close(lease_id, NowLocked());
}

std::map<std::string, LedgerTeam> RemotePool::Impl::Ledger() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.Totals(NowLocked());
}

void RemotePool::Impl::Disconnected(const absl::Status& why) {
  // A head with a journal keeps this job's leases through its restart and hands them back when
  // the job reconnects (Reclaim), so while it tries to, its tasks run on. Otherwise the head
  // takes a vanished job's leases back, so whatever this job held is lost now.
  // Kept no longer than the head keeps them: past its window they may be someone else's.
  bool keep;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keep = options_.reconnect_for.count() > 0 && link_ != nullptr && link_->reclaim_window.count() > 0;
    if (options_.reconnect_for.count() > 0) {
      link_lost_ = true;  // from here a Release waits for the new session (released_while_away_)
      lost_why_ = why;
      keep_leases_until_ = std::chrono::steady_clock::now() + (keep ? link_->reclaim_window : std::chrono::milliseconds(0));
    }
  }
  if (!keep) LoseHeldLeases(RpcConnection::kConnectionLost);
  if (options_.reconnect_for.count() <= 0) {
    GiveUp(why);
    return;
  }
  reconnect_cv_.notify_all();
}

void RemotePool::Impl::LoseHeldLeases(const std::string& why, const std::set<std::string>* only,
                                      const std::set<std::string>& except) {
  std::vector<std::pair<std::string, LeaseListener*>> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, held] : leases_.open()) {
      if ((only == nullptr || only->count(id) != 0) && except.count(id) == 0) lost.emplace_back(id, held.listener);
    }
  }
  for (auto& [id, user] : lost) {
    Close(id);
    Post([user = user, id = id, why] { user->OnLost(id, why); });
  }
}

RemotePool::Impl::Reclaimed RemotePool::Impl::Reclaim(
    Link& link, const std::vector<std::pair<std::string, LeaseListener*>>& held, std::vector<std::string> given_back,
    const std::vector<Pending>& waiting) {
  Reclaimed result;
  for (const auto& [id, user] : held) result.held.insert(id);
  std::set<std::string>& kept = result.kept;
  std::set<std::string>& queued = result.queued;
  // A head that keeps what a lost job held is told even when the job holds nothing now: what
  // it kept and the job does not name (withdrawn while away) then goes back at once.
  if (held.empty() && given_back.empty() && waiting.empty() && link.reclaim_window.count() == 0) return result;
  absl::Status st = link.connection->Call([&]() -> kj::Promise<absl::Status> {
    auto req = link.session->reclaimRequest();
    auto list = req.initLeases(held.size() + given_back.size());
    size_t i = 0;
    for (const auto& [id, user] : held) {
      list[i].setLeaseId(id);
      list[i++].setListener(link.ListenerFor(*this, user));
    }
    for (const std::string& id : given_back) {
      list[i].setLeaseId(id);  // taken, then released at once below
      list[i++].setListener(link.ListenerFor(*this, nullptr));
    }
    auto requests = req.initRequests(waiting.size());
    for (size_t j = 0; j < waiting.size(); ++j) {
      requests[j].setRequestId(waiting[j].request.id);
      requests[j].setListener(link.ListenerFor(*this, waiting[j].listener));
    }
    return req.send().then([&kept, &queued](capnp::Response<rpc::Session::ReclaimResults>&& resp) {
      for (capnp::Text::Reader id : resp.getKept()) kept.insert(id);
      for (capnp::Text::Reader id : resp.getQueued()) queued.insert(id);
      return absl::OkStatus();
    });
  });
  if (!st.ok()) {
    // Nothing is known to be kept: the held leases are lost (the caller says so) and the
    // requests are sent again; those given back meanwhile wait for the next connection.
    std::lock_guard<std::mutex> lock(mu_);
    released_while_away_.insert(released_while_away_.end(), given_back.begin(), given_back.end());
    kept.clear();
    queued.clear();
    return result;
  }
  // Given back before the reclaim (while away, or while it was under way: such a release reached
  // the head before the lease was this session's): give it back now.
  std::vector<std::string> to_release = given_back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, user] : held) {
      if (leases_.Find(id) == nullptr) to_release.push_back(id);
    }
  }
  for (const std::string& id : to_release) {
    if (kept.erase(id) == 0) continue;
    link.connection->Post([raw = &link, id] {
      if (raw->session.has_value()) ReleaseOn(*raw, id).detach([](kj::Exception&&) {});
    });
  }
  return result;
}

void RemotePool::Impl::GiveUp(const absl::Status& why) {
  LoseHeldLeases(RpcConnection::kConnectionLost);  // kept while reconnecting; gone for good now
  std::vector<std::pair<std::string, LeaseListener*>> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gave_up_ = true;
    for (const auto& [id, p] : pending_) failed.emplace_back(id, p.listener);
    pending_.clear();
  }
  absl::Status status = absl::UnavailableError(absl::StrCat("the pool service is unreachable: ", why.message()));
  for (auto& [id, user] : failed) {
    Post([user = user, id = id, status] { user->OnRequestFailed(id, status); });
  }
  Post([cb = options_.on_disconnected, why] {
    if (cb) cb(why);
  });
}

void RemotePool::Impl::Reconnect() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    reconnect_cv_.wait(lock, [this] { return stopping_ || link_lost_; });
    if (stopping_) return;
    const auto deadline = std::chrono::steady_clock::now() + options_.reconnect_for;
    auto backoff = std::chrono::milliseconds(50);
    absl::Status why = lost_why_;
    std::shared_ptr<Link> fresh;
    bool leases_dropped = false;
    while (fresh == nullptr && !stopping_ && std::chrono::steady_clock::now() < deadline) {
      if (!leases_dropped && std::chrono::steady_clock::now() >= keep_leases_until_) {
        // The head no longer keeps them: their GPUs may be someone else's by now.
        leases_dropped = true;
        lock.unlock();
        LoseHeldLeases(RpcConnection::kConnectionLost);
        lock.lock();
        continue;
      }
      lock.unlock();
      absl::StatusOr<std::shared_ptr<Link>> link = Dial(nullptr);
      lock.lock();
      if (link.ok()) {
        fresh = *std::move(link);
        break;
      }
      why = link.status();
      reconnect_cv_.wait_for(lock, backoff, [this] { return stopping_; });
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
    if (stopping_) return;
    std::shared_ptr<Link> old = std::move(link_);
    if (fresh == nullptr) {
      link_lost_ = false;
      lock.unlock();
      old.reset();
      GiveUp(why);
      return;
    }
    // The leases held through the loss, taken before any grant can arrive on the fresh session.
    std::vector<std::pair<std::string, LeaseListener*>> held;
    for (const auto& [id, lease] : leases_.open()) held.emplace_back(id, lease.listener);
    std::vector<std::string> given_back;
    given_back.swap(released_while_away_);
    link_ = fresh;
    link_lost_ = false;
    ++reconnections_;
    std::vector<Pending> resend;
    for (const auto& [id, p] : pending_) resend.push_back(p);
    lock.unlock();
    old.reset();  // closes the dead connection's loop
    // Those the head kept are this session's now; the others are lost (a head without a
    // journal kept none: they were reported at the loss).
    Reclaimed reclaimed = Reclaim(*fresh, held, std::move(given_back), resend);
    LoseHeldLeases("the pool service did not keep it while the job was away", &reclaimed.held, reclaimed.kept);
    // Withdrawn by the job while the reclaim was under way (its withdrawal may have reached the
    // head before the request was this session's): withdrawn again now. (One granted meanwhile
    // is no longer pending at the head either, which answers NotFound.)
    std::vector<std::string> withdrawn_meanwhile;
    {
      std::lock_guard<std::mutex> relock(mu_);
      for (const std::string& id : reclaimed.queued) {
        if (pending_.count(id) == 0) withdrawn_meanwhile.push_back(id);
      }
    }
    for (const std::string& id : withdrawn_meanwhile) {
      fresh->connection->Post([raw = fresh.get(), id] {
        if (raw->session.has_value()) WithdrawOn(*raw, id).detach([](kj::Exception&&) {});
      });
    }
    // Queued work the head did not keep (with its place in the queue) is asked for again, unless
    // the job withdrew it meanwhile.
    for (const Pending& p : resend) {
      if (reclaimed.queued.count(p.request.id) != 0) continue;
      {
        std::lock_guard<std::mutex> relock(mu_);
        if (pending_.count(p.request.id) == 0) continue;
      }
      absl::Status st = SendRequest(*fresh, p.request, p.listener);
      if (st.ok() || absl::IsAlreadyExists(st)) continue;
      bool still_pending;
      {
        std::lock_guard<std::mutex> relock(mu_);
        still_pending = pending_.erase(p.request.id) > 0;
      }
      if (still_pending) {
        Post([user = p.listener, id = p.request.id, st] { user->OnRequestFailed(id, st); });
      }
    }
    lock.lock();
  }
}

absl::StatusOr<std::shared_ptr<RemotePool::Impl::Link>> RemotePool::Impl::Dial(std::string* config_yaml) {
  auto link = std::make_shared<Link>();
  double pool_now = 0, clock_speed = 1, capacity = 0;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = options_.host, .port = options_.port,
                           .on_disconnected = [this](const absl::Status& why) { Disconnected(why); }},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.authenticateRequest();
        req.setTeam(options_.team);
        req.setToken(options_.token);
        req.setJobKey(job_key_);
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (!st.ok()) return st;
        rpc::Session::Client session = resp.getSession();
        // The response owns the message `info` reads: it must outlive the reads (ASan caught the
        // temporary freed at the end of the statement).
        auto info_response = session.infoRequest().send().wait(wait);
        auto info = info_response.getInfo();
        pool_now = info.getPoolNowS();
        clock_speed = info.getClockSpeed() > 0 ? info.getClockSpeed() : 1.0;
        capacity = info.getCapacityGpus();
        link->reclaim_window = std::chrono::milliseconds(static_cast<int64_t>(info.getReclaimWindowS() * 1000));
        if (config_yaml != nullptr) *config_yaml = info.getConfigYaml();
        link->session = kj::mv(session);  // only once nothing can fail: it must die on this loop
        return absl::OkStatus();
      });
  if (!c.ok()) return c.status();
  link->connection = *std::move(c);
  std::lock_guard<std::mutex> lock(mu_);
  pool_now_at_connect_ = pool_now;
  clock_speed_ = clock_speed;
  connected_at_ = std::chrono::steady_clock::now();
  capacity_gpus_ = capacity;
  return link;
}

absl::Status RemotePool::Impl::Start() {
  callback_thread_ = std::thread([this] { CallbackLoop(); });
  std::string config_yaml;
  absl::StatusOr<std::shared_ptr<Link>> link = Dial(&config_yaml);
  if (!link.ok()) return link.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    link_ = *std::move(link);
  }
  if (options_.reconnect_for.count() > 0) reconnect_thread_ = std::thread([this] { Reconnect(); });
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
  std::shared_ptr<Link> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    link = std::move(link_);
  }
  // A job that ends says so, after its releases (same ordered queue), so the head gives back at
  // once whatever is left instead of keeping it for a reclaim that will not come.
  if (link != nullptr && !job_key_.empty() && link->connection->connected()) {
    (void)link->connection->CallFor(
        [raw = link.get()]() -> kj::Promise<absl::Status> {
          if (!raw->session.has_value()) return absl::OkStatus();
          return raw->session->leaveRequest().send().then([](auto&&) { return absl::OkStatus(); });
        },
        std::chrono::seconds(2));
  }
  reconnect_cv_.notify_all();
  if (reconnect_thread_.joinable()) reconnect_thread_.join();
  link.reset();  // closes the connection: no listener is called after this
  {
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_stop_ = true;
  }
  cv_.notify_all();
  if (callback_thread_.joinable()) callback_thread_.join();
}

absl::Status RemotePool::Impl::SendRequest(Link& link, const pool::LeaseRequest& r, LeaseListener* listener) {
  return link.connection->Call([&] { return RequestOn(link, r, listener); });
}

kj::Promise<absl::Status> RemotePool::Impl::RequestOn(Link& link, const pool::LeaseRequest& r, LeaseListener* listener) {
  auto req = link.session->requestRequest();
  rpc::EncodeLeaseRequest(r, req.initRequest());
  req.setListener(link.ListenerFor(*this, listener));
  return req.send().then([this, listener](capnp::Response<rpc::Session::RequestResults>&& resp) {
    return Answered(resp, listener);
  });
}

kj::Promise<absl::Status> RemotePool::Impl::WithdrawOn(Link& link, const std::string& request_id) {
  auto req = link.session->withdrawRequest();
  req.setRequestId(request_id);
  return req.send().then([](capnp::Response<rpc::Session::WithdrawResults>&& resp) {
    return rpc::DecodeStatus(resp.getStatus());
  });
}

kj::Promise<absl::Status> RemotePool::Impl::ReleaseOn(Link& link, const std::string& lease_id) {
  auto req = link.session->releaseRequest();
  req.setLeaseId(lease_id);
  return req.send().then([](capnp::Response<rpc::Session::ReleaseResults>&& resp) {
    return rpc::DecodeStatus(resp.getStatus());
  });
}

absl::Status RemotePool::Impl::Answered(const capnp::Response<rpc::Session::RequestResults>& resp,
                                        LeaseListener* listener) {
  absl::Status st = rpc::DecodeStatus(resp.getStatus());
  if (!st.ok() || !resp.hasGranted()) return st;
  absl::StatusOr<pool::Lease> lease = rpc::DecodeLease(resp.getGranted());
  KJ_REQUIRE(lease.ok(), "malformed lease from the pool service", std::string(lease.status().message()));
  Granted(*std::move(lease), listener);
  return st;
}

absl::Status RemotePool::Impl::AddPending(const pool::LeaseRequest& r, LeaseListener* listener,
                                          std::shared_ptr<Link>* link) {
  if (listener == nullptr) return absl::InvalidArgumentError("a lease request needs a listener");
  std::lock_guard<std::mutex> lock(mu_);
  if (gave_up_ || link_ == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  if (pending_.count(r.id)) return absl::AlreadyExistsError(absl::StrCat("request '", r.id, "' is already pending"));
  // Recorded first: its grant may arrive before the call returns.
  pending_[r.id] = Pending{r, listener};
  // While the connection is being made again, the request waits for it.
  *link = link_lost_ ? nullptr : link_;
  return absl::OkStatus();
}

bool RemotePool::Impl::Refused(const pool::LeaseRequest& r, const absl::Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  // A connection lost under the call: the request is sent again once reconnected.
  if (link_lost_ && absl::IsUnavailable(st)) return false;
  return pending_.erase(r.id) > 0;
}

absl::Status RemotePool::Impl::Request(const pool::LeaseRequest& r, LeaseListener* listener) {
  std::shared_ptr<Link> link;
  if (absl::Status st = AddPending(r, listener, &link); !st.ok()) return st;
  if (link == nullptr) return absl::OkStatus();
  absl::Status st = SendRequest(*link, r, listener);
  if (!st.ok() && !Refused(r, st)) return absl::OkStatus();
  return st;
}

void RemotePool::Impl::Submit(const pool::LeaseRequest& r, LeaseListener* listener) {
  std::shared_ptr<Link> link;
  if (absl::Status st = AddPending(r, listener, &link); !st.ok()) {
    if (listener != nullptr) Post([listener, id = r.id, st] { listener->OnRequestFailed(id, st); });
    return;
  }
  if (link == nullptr) return;
  // The closure holds the link by pointer, as Release's does: it runs on the link's loop.
  link->connection->Post([this, raw = link.get(), r, listener] {
    // A connection that fails under the call is not a refusal (an exception, not a status):
    // the request stays pending, to be sent again after a reconnection or failed when the
    // client gives up (Disconnected).
    if (!raw->session.has_value()) return;
    RequestOn(*raw, r, listener)
        .then([this, r, listener](absl::Status st) {
          if (!st.ok() && Refused(r, st)) Post([listener, id = r.id, st] { listener->OnRequestFailed(id, st); });
        })
        .detach([](kj::Exception&&) {});
  });
}

absl::Status RemotePool::Impl::Withdraw(const std::string& request_id) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bool was_pending = pending_.erase(request_id) > 0;
    if (link_lost_) {
      return was_pending ? absl::OkStatus()
                         : absl::NotFoundError(absl::StrCat("request '", request_id, "' is not pending"));
    }
    if (gave_up_ || link_ == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
    link = link_;
  }
  return link->connection->Call([&] { return WithdrawOn(*link, request_id); });
}

absl::Status RemotePool::Impl::Release(const std::string& lease_id) {
  std::shared_ptr<Link> link;
  bool held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    link = link_;
    held = leases_.Find(lease_id) != nullptr;
  }
  if (link == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  if (held) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (link_lost_) {  // reconnecting: given back to the restarted head once reclaimed
        leases_.Close(lease_id, NowLocked());
        released_while_away_.push_back(lease_id);
        return absl::OkStatus();
      }
    }
    // A lease this job holds: given back without waiting for the answer (Ray returns leases the
    // same way). The head can refuse only a lease it already took back (lost, revoked past its
    // deadline), which it has told this job about, so nothing is lost by not waiting. The
    // connection keeps the request alive until it is answered. The closure holds the link by
    // pointer: it runs on the link's loop, which ~Link stops before the link is freed, and it
    // finds the session already dropped if ~Link got there first.
    Close(lease_id);
    link->connection->Post([raw = link.get(), lease_id] {
      if (raw->session.has_value()) ReleaseOn(*raw, lease_id).detach([](kj::Exception&&) {});
    });
    return absl::OkStatus();
  }
  // Not one of this job's leases (given back already, or never granted to it): the head says
  // why (NotFound, PermissionDenied).
  absl::Status st = link->connection->Call([&] { return ReleaseOn(*link, lease_id); });
  if (st.ok() || absl::IsNotFound(st)) Close(lease_id);
  return st;
}

void RemotePool::Impl::Checkpointed(const std::string& lease_id, const CheckpointNote& note) {
  std::shared_ptr<Link> link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leases_.Find(lease_id) == nullptr) return;  // given back or lost meanwhile
    link = link_;
  }
  if (link == nullptr) return;  // reconnecting: the lease is lost anyway
  // Sent in order with the job's other calls, without waiting for the answer (the head refuses
  // only a lease it already took back, which this job has been told about).
  link->connection->Post([raw = link.get(), lease_id, note] {
    if (!raw->session.has_value()) return;
    auto req = raw->session->checkpointedRequest();
    req.setLeaseId(lease_id);
    req.setTaskKey(note.task_key);
    req.setVersion(note.version);
    req.setStep(note.step);
    req.setPath(note.path);
    req.send().detach([](kj::Exception&&) {});
  });
}

void RemotePool::Impl::ForgetCheckpoints(const std::string& task_key) {
  std::shared_ptr<Link> link = CurrentLink();
  if (link == nullptr) return;
  link->connection->Post([raw = link.get(), task_key] {
    if (!raw->session.has_value()) return;
    auto req = raw->session->forgetCheckpointsRequest();
    req.setTaskKey(task_key);
    req.send().detach([](kj::Exception&&) {});
  });
}

absl::StatusOr<rpc::DiscoveredPool> RemotePool::Impl::DescribeNode(const std::string& name) {
  std::shared_ptr<Link> link = CurrentLink();
  if (link == nullptr) return absl::UnavailableError(RpcConnection::kConnectionLost);
  std::string bytes;
  absl::Status st = link->connection->Call([&]() -> kj::Promise<absl::Status> {
    auto req = link->session->describeNodeRequest();
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
void RemotePool::Submit(pool::LeaseRequest request, LeaseListener* listener) { impl_->Submit(request, listener); }
absl::Status RemotePool::Withdraw(const std::string& request_id) { return impl_->Withdraw(request_id); }
absl::Status RemotePool::Release(const std::string& lease_id) { return impl_->Release(lease_id); }
void RemotePool::Checkpointed(const std::string& lease_id, const CheckpointNote& note) {
  impl_->Checkpointed(lease_id, note);
}
void RemotePool::ForgetCheckpoints(const std::string& task_key) { impl_->ForgetCheckpoints(task_key); }
double RemotePool::Now() const { return impl_->Now(); }
const pool::PoolConfig& RemotePool::config() const { return impl_->config_; }
double RemotePool::capacity_gpus() const { return impl_->capacity_gpus_; }
std::map<std::string, LedgerTeam> RemotePool::Ledger() const { return impl_->Ledger(); }
absl::StatusOr<rpc::DiscoveredPool> RemotePool::DescribeNode(const std::string& name) {
  return impl_->DescribeNode(name);
}
bool RemotePool::connected() const { return impl_->connected(); }
uint64_t RemotePool::reconnections() const { return impl_->reconnections(); }

}  // namespace gpupool::runtime
