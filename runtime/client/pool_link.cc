#include "runtime/client/pool_link.h"

#include <utility>

#include <kj/debug.h>

#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/worker_launch_codec.h"

namespace gpupool::runtime {
namespace {

// The job's listener for its requests, as a capability the head calls (the link's loop thread).
// A null `user` (a lease given back while reconnecting, reclaimed only to be released) hears
// nothing.
class ListenerImpl final : public rpc::LeaseListener::Server {
 public:
  ListenerImpl(PoolLink::Events& events, LeaseListener* user) : events_(events), user_(user) {}
  kj::Promise<void> granted(GrantedContext context) override {
    if (user_ == nullptr) return kj::READY_NOW;
    absl::StatusOr<pool::Lease> lease = rpc::DecodeLease(context.getParams().getLease());
    KJ_REQUIRE(lease.ok(), "malformed lease from the pool service", std::string(lease.status().message()));
    events_.Granted(*std::move(lease), user_);
    return kj::READY_NOW;
  }
  kj::Promise<void> revoked(RevokedContext context) override {
    if (user_ == nullptr) return kj::READY_NOW;
    auto p = context.getParams();
    events_.Revoked(p.getLeaseId(), rpc::DecodeRevokeCause(p.getCause()), p.getDeadlineS(), user_);
    return kj::READY_NOW;
  }
  kj::Promise<void> lost(LostContext context) override {
    if (user_ == nullptr) return kj::READY_NOW;
    auto p = context.getParams();
    events_.Lost(p.getLeaseId(), p.getWhy(), user_);
    return kj::READY_NOW;
  }

 private:
  PoolLink::Events& events_;
  LeaseListener* user_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PoolLink>> PoolLink::Dial(const Options& options, HeadInfo* head) {
  std::unique_ptr<PoolLink> link(new PoolLink(*options.events));
  Events* events = options.events;
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = options.host, .port = options.port,
                           .on_disconnected = [events](const absl::Status& why) { events->Disconnected(why); }},
      [&](rpc::PoolService::Client pool_service, kj::WaitScope& wait) -> absl::Status {
        auto req = pool_service.authenticateRequest();
        req.setTeam(options.team);
        req.setToken(options.token);
        req.setJobKey(options.job_key);
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (!st.ok()) return st;
        rpc::Session::Client session = resp.getSession();
        // The response owns the message `info` reads: it must outlive the reads (ASan caught the
        // temporary freed at the end of the statement).
        auto info_response = session.infoRequest().send().wait(wait);
        auto info = info_response.getInfo();
        head->pool_now_s = info.getPoolNowS();
        head->clock_speed = info.getClockSpeed() > 0 ? info.getClockSpeed() : 1.0;
        head->capacity_gpus = info.getCapacityGpus();
        link->reclaim_window_ = std::chrono::milliseconds(static_cast<int64_t>(info.getReclaimWindowS() * 1000));
        head->config_yaml = info.getConfigYaml();
        link->loop_.AssertOnThread();  // `setup` runs on the connection's loop thread
        link->session_ = kj::mv(session);  // only once nothing can fail: it must die on this loop
        return absl::OkStatus();
      });
  if (!c.ok()) return c.status();
  link->connection_ = *std::move(c);
  return link;
}

PoolLink::~PoolLink() {
  if (connection_ != nullptr) {
    connection_->Sync([this] {
      loop_.AssertOnThread();
      session_.reset();
      listeners_.clear();
    });
  }
}

rpc::LeaseListener::Client PoolLink::ListenerFor(LeaseListener* user) {
  auto it = listeners_.find(user);
  if (it == listeners_.end()) {
    it = listeners_.emplace(user, rpc::LeaseListener::Client(kj::heap<ListenerImpl>(events_, user))).first;
  }
  return it->second;
}

kj::Promise<absl::Status> PoolLink::RequestOn(const pool::LeaseRequest& r, LeaseListener* listener) {
  auto req = session_->requestRequest();
  rpc::EncodeLeaseRequest(r, req.initRequest());
  req.setListener(ListenerFor(listener));
  return req.send().then([this, listener](capnp::Response<rpc::Session::RequestResults>&& resp) {
    return Answered(resp, listener);
  });
}

kj::Promise<absl::Status> PoolLink::WithdrawOn(const std::string& request_id) {
  auto req = session_->withdrawRequest();
  req.setRequestId(request_id);
  return req.send().then([](capnp::Response<rpc::Session::WithdrawResults>&& resp) {
    return rpc::DecodeStatus(resp.getStatus());
  });
}

kj::Promise<absl::Status> PoolLink::ReleaseOn(const std::string& lease_id, double busy_gpu_s) {
  auto req = session_->releaseRequest();
  req.setLeaseId(lease_id);
  req.setBusyGpuSeconds(busy_gpu_s);
  return req.send().then([](capnp::Response<rpc::Session::ReleaseResults>&& resp) {
    return rpc::DecodeStatus(resp.getStatus());
  });
}

absl::Status PoolLink::Answered(const capnp::Response<rpc::Session::RequestResults>& resp, LeaseListener* listener) {
  absl::Status st = rpc::DecodeStatus(resp.getStatus());
  if (!st.ok() || !resp.hasGranted()) return st;
  absl::StatusOr<pool::Lease> lease = rpc::DecodeLease(resp.getGranted());
  KJ_REQUIRE(lease.ok(), "malformed lease from the pool service", std::string(lease.status().message()));
  events_.Granted(*std::move(lease), listener);
  return st;
}

absl::Status PoolLink::Request(const pool::LeaseRequest& r, LeaseListener* listener) {
  return connection_->Call([&] {
    loop_.AssertOnThread();
    return RequestOn(r, listener);
  });
}

void PoolLink::PostRequest(const pool::LeaseRequest& r, LeaseListener* listener,
                           std::function<void(const absl::Status&)> answered) {
  // The closures hold the link by pointer: they run on its loop, which ~PoolLink stops before the
  // link is freed, and find the session already dropped if ~PoolLink got there first.
  connection_->Post([this, r, listener, answered = std::move(answered)] {
    loop_.AssertOnThread();
    // A connection that fails under the call is not an answer (an exception, not a status).
    if (!session_.has_value()) return;
    RequestOn(r, listener)
        .then([answered](absl::Status st) { answered(st); })
        .detach([](kj::Exception&&) {});
  });
}

absl::Status PoolLink::Withdraw(const std::string& request_id) {
  return connection_->Call([&] {
    loop_.AssertOnThread();
    return WithdrawOn(request_id);
  });
}

absl::Status PoolLink::Release(const std::string& lease_id) {
  return connection_->Call([&] {
    loop_.AssertOnThread();
    return ReleaseOn(lease_id, -1);
  });
}

void PoolLink::PostWithdraw(const std::string& request_id) {
  connection_->Post([this, request_id] {
    loop_.AssertOnThread();
    if (session_.has_value()) WithdrawOn(request_id).detach([](kj::Exception&&) {});
  });
}

void PoolLink::PostRelease(const std::string& lease_id, double busy_gpu_s) {
  // The connection keeps the request alive until it is answered.
  connection_->Post([this, lease_id, busy_gpu_s] {
    loop_.AssertOnThread();
    if (session_.has_value()) ReleaseOn(lease_id, busy_gpu_s).detach([](kj::Exception&&) {});
  });
}

void PoolLink::PostCheckpointed(const std::string& lease_id, const CheckpointNote& note) {
  connection_->Post([this, lease_id, note] {
    loop_.AssertOnThread();
    if (!session_.has_value()) return;
    auto req = session_->checkpointedRequest();
    req.setLeaseId(lease_id);
    req.setTaskKey(note.task_key);
    req.setVersion(note.version);
    req.setStep(note.step);
    req.setPath(note.path);
    req.send().detach([](kj::Exception&&) {});
  });
}

void PoolLink::PostForgetCheckpoints(const std::string& task_key) {
  connection_->Post([this, task_key] {
    loop_.AssertOnThread();
    if (!session_.has_value()) return;
    auto req = session_->forgetCheckpointsRequest();
    req.setTaskKey(task_key);
    req.send().detach([](kj::Exception&&) {});
  });
}

absl::StatusOr<rpc::DiscoveredPool> PoolLink::DescribeNode(const std::string& name) {
  std::string bytes;
  absl::Status st = connection_->Call([&]() -> kj::Promise<absl::Status> {
    loop_.AssertOnThread();
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

absl::StatusOr<int> PoolLink::StartWorker(const WorkerLaunch& launch) {
  int pid = 0;
  absl::Status st = connection_->Call([&]() -> kj::Promise<absl::Status> {
    loop_.AssertOnThread();
    auto req = session_->startWorkerRequest();
    rpc::EncodeWorkerLaunch(launch, req.initLaunch());
    return req.send().then([&pid](capnp::Response<rpc::Session::StartWorkerResults>&& resp) {
      absl::Status s = rpc::DecodeStatus(resp.getStatus());
      if (s.ok()) pid = resp.getPid();
      return s;
    });
  });
  if (!st.ok()) return st;
  return pid;
}

absl::StatusOr<PoolLink::Reclaimed> PoolLink::Reclaim(const Holders& held, const std::vector<std::string>& given_back,
                                                      const Holders& waiting) {
  Reclaimed result;
  absl::Status st = connection_->Call([&]() -> kj::Promise<absl::Status> {
    loop_.AssertOnThread();
    auto req = session_->reclaimRequest();
    auto list = req.initLeases(held.size() + given_back.size());
    size_t i = 0;
    for (const auto& [id, user] : held) {
      list[i].setLeaseId(id);
      list[i++].setListener(ListenerFor(user));
    }
    for (const std::string& id : given_back) {
      list[i].setLeaseId(id);  // taken, then released at once by the caller
      list[i++].setListener(ListenerFor(nullptr));
    }
    auto requests = req.initRequests(waiting.size());
    for (size_t j = 0; j < waiting.size(); ++j) {
      requests[j].setRequestId(waiting[j].first);
      requests[j].setListener(ListenerFor(waiting[j].second));
    }
    return req.send().then([&result](capnp::Response<rpc::Session::ReclaimResults>&& resp) {
      for (capnp::Text::Reader id : resp.getKept()) result.kept.insert(id);
      for (capnp::Text::Reader id : resp.getQueued()) result.queued.insert(id);
      return absl::OkStatus();
    });
  });
  if (!st.ok()) return st;
  return result;
}

void PoolLink::Leave(std::chrono::milliseconds timeout) {
  (void)connection_->CallFor(
      [this]() -> kj::Promise<absl::Status> {
        loop_.AssertOnThread();
        if (!session_.has_value()) return absl::OkStatus();
        return session_->leaveRequest().send().then([](auto&&) { return absl::OkStatus(); });
      },
      timeout);
}

}  // namespace gpupool::runtime
