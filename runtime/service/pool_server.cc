#include "runtime/service/pool_server.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/task_key.h"
#include "nlohmann/json.hpp"
#include "pool/scheduler/wait_reason.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_ids.h"
#include "runtime/service/pool_server_impl.h"
#include "runtime/service/reclaim_book.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/rpc/read_ahead_stream.h"

namespace gpupool::runtime {
namespace {

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

// A team's session. Pool request ids are the job's ids prefixed with the session's (pool_ids.h).
// A request names the session's team, or another
// team whose token is the one the session presented (an mpirun job's head gives every team the
// job's token, so one job submits for several teams; a shared head gives each team its own).
constexpr size_t kMaxCheckpointPathBytes = 4096;  // PATH_MAX
constexpr size_t kMaxCheckpointKeysPerSession = 100000;  // tasks with live checkpoints, per job

class SessionImpl final : public rpc::Session::Server {
 public:
  SessionImpl(PoolServer::Impl& server, std::string team, std::string token, std::string job_key)
      : server_(server), team_(std::move(team)), token_(std::move(token)), job_key_(std::move(job_key)),
        prefix_(SessionPrefix(server.NextSessionNumber())) {
    server_.NewSession(job_key_, this);
  }

  ~SessionImpl() {
    const bool newest = server_.EndSession(job_key_, this);
    // The head is stopping, not the job: with a journal, its leases and queued requests stay
    // there for the next run to take back and the job to reclaim (its tasks run on, its requests
    // keep their place). The pool goes with the head.
    if (server_.stopping()) {
      for (auto& [client_id, p] : pending_) server_.by_request().erase(p.pool_id);
      for (auto& [id, listener] : leases_) server_.by_lease().erase(id);
      return;
    }
    // A job that may come back (it has a key) finds its leases and requests kept for the reclaim
    // window: a lost connection is not a dead job. Its tasks run on meanwhile, and its requests
    // keep their place in the queue (a grant meanwhile is kept for it too). Not when the job is
    // back already on a newer session: it has reclaimed what it could, and holds the rest lost.
    if (!job_key_.empty() && !leaving_ && newest && server_.journal() != nullptr) {
      const auto until = server_.KeepUntil();
      for (auto& [client_id, p] : pending_) {
        server_.by_request().erase(p.pool_id);
        server_.kept().KeepRequest(p.pool_id, ReclaimBook::KeptRequest{
                                                  .job_key = job_key_, .client_id = client_id, .team = p.team, .until = until});
      }
      for (auto& [id, listener] : leases_) {
        server_.by_lease().erase(id);
        server_.kept().KeepLease(id, job_key_, until);
      }
      return;
    }
    // The job is gone: what it asked for goes back to the pool. A grant already queued for a
    // withdrawn request finds no session and is released by the server.
    for (auto& [client_id, p] : pending_) {
      server_.by_request().erase(p.pool_id);
      (void)server_.pool().Withdraw(p.pool_id);
      if (server_.journal() != nullptr) server_.journal()->RemoveRequest(p.pool_id);
    }
    for (auto& [id, listener] : leases_) {
      server_.by_lease().erase(id);
      (void)server_.pool().Release(id);
      server_.ScheduleSoon();
      server_.JournalClose(id, "job disconnected");
    }
  }

  kj::Promise<void> request(RequestContext context) override {
    auto params = context.getParams();
    std::string pool_id, team, journaled;
    absl::Status st = DoRequest(params.getRequest(), params.getListener(), &pool_id, &team,
                                server_.journal() != nullptr ? &journaled : nullptr);
    std::optional<pool::Lease> granted;
    if (st.ok() && server_.journal() == nullptr && server_.pool().pending_requests() == 1) {
      // Nothing else waits, so a cycle now costs one decision: when it admits the request, the
      // answer carries the lease. (With others waiting, the cycle after this turn decides for
      // all of them at once. With a journal the answer waits for the disk, and the grant
      // should not: the listener hears of it.)
      answering_ = pool_id;
      server_.ScheduleNow();
      answering_.clear();
      granted = std::move(answered_grant_);
      answered_grant_.reset();
    }
    if (!st.ok() || server_.journal() == nullptr) {
      auto results = context.getResults();
      rpc::EncodeStatus(st, results.initStatus());
      if (granted.has_value()) rpc::EncodeLease(*granted, results.initGranted());
      return kj::READY_NOW;
    }
    // Acknowledged once durable: a head killed after this reply still knows the request.
    // With the job's key, so that a restarted head queues it again for that job.
    JournalTicket t = server_.journal()->RecordRequest(RequestRecord{.request_id = pool_id,
                                                                     .job_id = job_key_,
                                                                     .team = team,
                                                                     .request = std::move(journaled),
                                                                     .submitted_s = WallSeconds()});
    return server_.Durable(t).then([context](absl::Status durable) mutable {
      rpc::EncodeStatus(durable, context.getResults().initStatus());
    });
  }

  kj::Promise<void> withdraw(WithdrawContext context) override {
    absl::Status st;
    std::string id = context.getParams().getRequestId();
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      st = absl::NotFoundError(absl::StrCat("request '", id, "' is not pending in this session"));
    } else {
      const std::string pool_id = it->second.pool_id;
      st = server_.pool().Withdraw(pool_id);
      pending_.erase(it);
      server_.by_request().erase(pool_id);
      if (server_.journal() != nullptr) server_.journal()->RemoveRequest(pool_id);
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> release(ReleaseContext context) override {
    absl::Status st;
    std::string id = context.getParams().getLeaseId();
    auto it = leases_.find(id);
    if (it == leases_.end()) {
      st = NotHeld(id);
    } else {
      st = server_.pool().Release(id);
      server_.ScheduleSoon();
      leases_.erase(it);
      server_.by_lease().erase(id);
      if (server_.journal() != nullptr) {
        JournalTicket t = server_.journal()->CloseLease(id, WallSeconds(), "released");
        return server_.Durable(t).then([context, st](absl::Status durable) mutable {
          rpc::EncodeStatus(st.ok() ? durable : st, context.getResults().initStatus());
        });
      }
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> checkpointed(CheckpointedContext context) override {
    auto params = context.getParams();
    std::string id = params.getLeaseId();
    std::string key = params.getTaskKey();
    absl::Status st;
    if (leases_.find(id) == leases_.end()) {
      st = NotHeld(id);
    } else if (absl::Status valid = checkpoint::ValidateTaskKey(key); !valid.ok()) {
      st = valid;
    } else if (params.getPath().size() > kMaxCheckpointPathBytes) {
      st = absl::InvalidArgumentError(absl::StrCat("a checkpoint path of ", params.getPath().size(),
                                                   " bytes; at most ", kMaxCheckpointPathBytes));
    } else {
      server_.pool().Checkpointed(id, CheckpointNote{key, params.getVersion(), params.getStep(), params.getPath()});
      if (server_.journal() != nullptr) {
        if (checkpoint_keys_.size() >= kMaxCheckpointKeysPerSession && checkpoint_keys_.count(key) == 0) {
          rpc::EncodeStatus(absl::ResourceExhaustedError(absl::StrCat(
                                "this session already indexes ", kMaxCheckpointKeysPerSession, " tasks' checkpoints")),
                            context.getResults().initStatus());
          return kj::READY_NOW;
        }
        checkpoint_keys_.insert(key);
        JournalTicket t = server_.journal()->RecordCheckpoint(CheckpointRecord{
            .task_key = key, .job_id = IndexOwner(), .version = static_cast<int64_t>(params.getVersion()),
            .path = params.getPath(), .step = params.getStep(), .committed_s = WallSeconds()});
        return server_.Durable(t).then([context](absl::Status durable) mutable {
          rpc::EncodeStatus(durable, context.getResults().initStatus());
        });
      }
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> forgetCheckpoints(ForgetCheckpointsContext context) override {
    std::string key = context.getParams().getTaskKey();
    absl::Status st;
    if (checkpoint_keys_.erase(key) == 0 && !RecordedByThisJob(key)) {
      st = absl::NotFoundError(absl::StrCat("this job recorded no checkpoint of '", key, "'"));
    } else if (server_.journal() != nullptr) {
      JournalTicket t = server_.journal()->RemoveCheckpoints(key);
      return server_.Durable(t).then([context](absl::Status durable) mutable {
        rpc::EncodeStatus(durable, context.getResults().initStatus());
      });
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> reclaim(ReclaimContext context) override {
    // Revocations the pool made while nobody held the lease are told to the job now.
    std::map<std::string, int64_t> revoking;
    for (const pool::Lease& l : server_.pool().Leases()) {
      if (l.revoke_deadline_s.has_value()) revoking[l.id] = *l.revoke_deadline_s;
    }
    auto params = context.getParams();
    // Only the job that held them: the key it presented then and now (a job of the same team
    // cannot take another's lease, whose id `gpupool queue` shows). TakeLease and TakeRequest
    // match nothing for a job without a key.
    std::vector<std::string> kept;
    for (rpc::HeldLease::Reader held : params.getLeases()) {
      std::string id = held.getLeaseId();
      if (!server_.kept().TakeLease(id, job_key_)) continue;  // released meanwhile, or never kept
      AdoptLease(id, held.getListener());
      kept.push_back(id);
    }
    std::vector<std::string> queued;
    std::vector<pool::Lease> granted_while_away;
    for (rpc::QueuedRequest::Reader waiting : params.getRequests()) {
      std::string client_id = waiting.getRequestId();
      if (pending_.count(client_id) != 0) continue;  // sent again on this session already
      auto taken = server_.kept().TakeRequest(job_key_, client_id);
      if (!taken.has_value()) continue;  // granted and lost meanwhile, or never kept: sent again
      auto& [pool_id, request] = *taken;
      if (request.granted.has_value()) {
        AdoptLease(request.granted->id, waiting.getListener());
        granted_while_away.push_back(*std::move(request.granted));
        granted_while_away.back().request.id = client_id;
      } else {
        pending_.emplace(client_id, Pending{pool_id, request.team, waiting.getListener()});
        server_.by_request()[pool_id] = this;
      }
      queued.push_back(client_id);
    }
    // What the job did not name, it no longer holds or wants (released or withdrawn while it
    // was away): back to the pool now rather than at the end of the window.
    server_.GiveBack(server_.kept().TakeRest(job_key_), "not reclaimed by its job when it came back");
    auto results = context.getResults();
    auto out = results.initKept(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) out.set(i, kept[i]);
    auto out_queued = results.initQueued(queued.size());
    for (size_t i = 0; i < queued.size(); ++i) out_queued.set(i, queued[i]);
    for (const pool::Lease& lease : granted_while_away) {
      auto req = leases_.at(lease.id).grantedRequest();
      rpc::EncodeLease(lease, req.initLease());
      req.send().detach([](kj::Exception&&) {});
      kept.push_back(lease.id);
    }
    for (const std::string& id : kept) {
      if (auto r = revoking.find(id); r != revoking.end()) {
        Revoked(id, pool::RevokeCause::kReclaim, static_cast<double>(r->second));
      }
    }
    return kj::READY_NOW;
  }

  // A lease kept for this job is this session's from now on.
  void AdoptLease(const std::string& id, rpc::LeaseListener::Client listener) {
    leases_.insert_or_assign(id, kj::mv(listener));
    server_.by_lease()[id] = this;
  }

  // Why this session cannot act on lease `id`: another session's (PermissionDenied), or nobody's.
  absl::Status NotHeld(const std::string& id) const {
    return server_.by_lease().count(id) != 0
               ? absl::PermissionDeniedError(absl::StrCat("lease '", id, "' is not held by this session"))
               : absl::NotFoundError(absl::StrCat("lease '", id, "' is not held"));
  }

  // Who the index says recorded a checkpoint: the job's key when it has one (it survives the
  // job's reconnections), else this session.
  std::string IndexOwner() const { return job_key_.empty() ? prefix_ : job_key_; }
  // An index entry this job recorded on an earlier connection (a read of the journal).
  bool RecordedByThisJob(const std::string& key) {
    if (job_key_.empty() || server_.journal() == nullptr) return false;
    absl::StatusOr<std::vector<CheckpointRecord>> history = server_.journal()->CheckpointHistory(key);
    return history.ok() && !history->empty() && history->back().job_id == job_key_;
  }

  kj::Promise<void> leave(LeaveContext) override {
    leaving_ = true;
    return kj::READY_NOW;
  }

  const std::string& team() const { return team_; }

  kj::Promise<void> info(InfoContext context) override {
    PoolService& pool = server_.pool();
    auto info = context.getResults().initInfo();
    info.setPoolNowS(pool.Now());
    info.setClockSpeed(server_.pool().clock_speed());
    info.setConfigYaml(pool.config_text());
    info.setCapacityGpus(pool.capacity_gpus());
    info.setDriver(pool.driver_name());
    info.setDurable(server_.journal() != nullptr);
    info.setReclaimWindowS(server_.journal() != nullptr && !job_key_.empty()
                               ? static_cast<double>(server_.options_.reclaim_window.count()) / 1000.0
                               : 0.0);
    return kj::READY_NOW;
  }

  kj::Promise<void> describeNode(DescribeNodeContext context) override {
    std::string name = context.getParams().getName();
    rpc::DiscoveredPool one{server_.pool().driver_name(), rpc::DiscoveredNodes(server_.pool().inventory(), name)};
    auto results = context.getResults();
    if (one.nodes.empty()) {
      rpc::EncodeStatus(absl::NotFoundError(absl::StrCat("node '", name, "' is not in this pool")), results.initStatus());
      return kj::READY_NOW;
    }
    std::string bytes = rpc::EncodeNodes(one);
    results.setInventory(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
    rpc::EncodeStatus(absl::OkStatus(), results.initStatus());
    return kj::READY_NOW;
  }

  // Called by the server's event pump (loop thread).
  void Granted(pool::Lease lease) {
    std::optional<absl::string_view> client_id = ClientIdOf(lease.request.id);
    auto it = client_id.has_value() ? pending_.find(std::string(*client_id)) : pending_.end();
    if (it == pending_.end() || it->second.pool_id != lease.request.id) return;
    std::string client = it->first;
    Pending p = std::move(it->second);
    pending_.erase(it);
    server_.by_request().erase(lease.request.id);
    server_.by_lease()[lease.id] = this;
    server_.JournalLease(lease, job_key_);  // what reclaims it after a restart
    bool answering = lease.request.id == answering_;
    lease.request.id = std::move(client);
    if (answering) {
      answered_grant_ = lease;  // the request's answer carries it
    } else {
      auto req = p.listener.grantedRequest();
      rpc::EncodeLease(lease, req.initLease());
      req.send().detach([](kj::Exception&&) {});  // a gone job is cleaned up when its session ends
    }
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
    server_.JournalClose(lease_id, "lost");
  }

 private:
  struct Pending {
    std::string pool_id;  // prefix_ + the job's id, or the id it had before a restart
    std::string team;     // the request's (the session's, or one its token also serves)
    rpc::LeaseListener::Client listener;
  };

  // Queues the request; `journaled`, when given, receives its bytes for the journal.
  absl::Status DoRequest(rpc::LeaseRequest::Reader wire, rpc::LeaseListener::Client listener, std::string* pool_id_out,
                         std::string* team_out, std::string* journaled) {
    absl::StatusOr<pool::LeaseRequest> r = rpc::DecodeLeaseRequest(wire);
    if (!r.ok()) return r.status();
    if (r->id.empty()) return absl::InvalidArgumentError("the request has no id");
    if (r->team.empty()) r->team = team_;
    if (r->team != team_ && !server_.Authenticate(r->team, token_).ok()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "this session is team '", team_, "'; it cannot request for team '", r->team, "'"));
    }
    std::string client_id = r->id;
    // Its own id: a request reclaimed after a restart keeps the pool id it had ("s<N>/...").
    if (pending_.count(client_id)) {
      return absl::AlreadyExistsError(absl::StrCat("request '", client_id, "' is already pending"));
    }
    r->id = prefix_ + client_id;
    std::string pool_id = r->id;
    if (journaled != nullptr) *journaled = rpc::LeaseRequestToBytes(*r);
    // The job sends one capability per listener: holding on to the latest keeps the head from
    // releasing it (a Release message to the job) each time a lease ends.
    last_listener_ = listener;
    // Registered first: the grant is handled on this thread, after this call returns.
    *team_out = r->team;
    pending_.emplace(client_id, Pending{pool_id, r->team, kj::mv(listener)});
    server_.by_request()[pool_id] = this;
    absl::Status st = server_.pool().Request(*std::move(r), &server_);
    server_.ScheduleSoon();
    if (!st.ok()) {
      pending_.erase(client_id);
      server_.by_request().erase(pool_id);
    }
    *pool_id_out = pool_id;
    return st;
  }

  PoolServer::Impl& server_;
  const std::string team_;
  const std::string token_;  // what it authenticated with
  const std::string job_key_;  // the job's own secret ("" : none): who may reclaim its leases
  bool leaving_ = false;       // the job said it is ending: nothing is kept when it closes
  // The request being answered while a cycle runs inside its handler, and its grant.
  std::string answering_;
  std::optional<pool::Lease> answered_grant_;
  std::optional<rpc::LeaseListener::Client> last_listener_;
  const std::string prefix_;
  std::map<std::string, Pending> pending_;                     // by the job's own request id
  std::map<std::string, rpc::LeaseListener::Client> leases_;   // by lease id
  std::set<std::string> checkpoint_keys_;  // task keys this session recorded in the index
};

// A node agent's connection. Its node is up while it lives (and heartbeats).
class AgentSessionImpl final : public rpc::AgentSession::Server {
 public:
  explicit AgentSessionImpl(PoolServer::Impl& server) : server_(server) {}
  ~AgentSessionImpl() {
    if (!node_.empty()) server_.AgentGone(node_, this, "its agent disconnected");
  }
  void set_node(std::string node) { node_ = std::move(node); }

  kj::Promise<void> heartbeat(HeartbeatContext) override {
    server_.Heartbeat(node_, this);
    return kj::READY_NOW;
  }
  kj::Promise<void> reportHealth(ReportHealthContext context) override {
    auto p = context.getParams();
    auto wire = static_cast<uint16_t>(p.getHealth());
    absl::Status st;
    if (wire > static_cast<uint16_t>(pool::HealthState::kLost)) {
      st = absl::InvalidArgumentError(absl::StrCat("unknown health value ", wire));
    } else {
      st = server_.pool().ReportHealth(pool::GpuRef{node_, p.getGpuIndex()}, static_cast<pool::HealthState>(wire));
    }
    rpc::EncodeStatus(st, context.getResults().initStatus());
    return kj::READY_NOW;
  }

 private:
  PoolServer::Impl& server_;
  std::string node_;
};

namespace {

bool SameToken(const std::string& a, const std::string& b);

class PoolServiceImpl final : public rpc::PoolService::Server {
 public:
  explicit PoolServiceImpl(PoolServer::Impl& server) : server_(server) {}
  kj::Promise<void> authenticate(AuthenticateContext context) override {
    auto params = context.getParams();
    absl::Status st;
    if (params.getTeam().size() > rpc::kMaxTextBytes || params.getToken().size() > rpc::kMaxTextBytes ||
        params.getJobKey().size() > rpc::kMaxTextBytes) {
      st = absl::InvalidArgumentError("team, token or job key is longer than 4096 bytes");
    } else {
      st = server_.Authenticate(params.getTeam(), params.getToken());
    }
    auto results = context.getResults();
    rpc::EncodeStatus(st, results.initStatus());
    if (st.ok()) {
      results.setSession(kj::heap<SessionImpl>(server_, params.getTeam(), params.getToken(), params.getJobKey()));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> registerAgent(RegisterAgentContext context) override {
    auto params = context.getParams();
    auto results = context.getResults();
    absl::Status st = params.getToken().size() > rpc::kMaxTextBytes
                          ? absl::InvalidArgumentError("token is longer than 4096 bytes")
                          : server_.AuthenticateAgent(params.getToken());
    if (st.ok()) {
      auto agent = kj::heap<AgentSessionImpl>(server_);
      absl::StatusOr<std::string> node = server_.RegisterAgent(params.getInventory(), agent.get());
      st = node.status();
      if (node.ok()) {
        agent->set_node(*node);
        results.setAgent(kj::mv(agent));
      }
    }
    rpc::EncodeStatus(st, results.initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> usage(UsageContext context) override {
    auto p = context.getParams();
    auto results = context.getResults();
    if (!Known(p.getToken())) {
      rpc::EncodeStatus(absl::UnauthenticatedError("usage needs a team's or the agents' token"), results.initStatus());
      return kj::READY_NOW;
    }
    absl::Status st;
    std::string report = server_.Usage(p.getFromS(), p.getToS(), p.getGroupBy(), &st);
    rpc::EncodeStatus(st, results.initStatus());
    if (st.ok()) results.setReport(report);
    return kj::READY_NOW;
  }

  bool Known(const std::string& token) const {
    bool known = server_.AuthenticateAgent(token).ok();
    for (const auto& [team, t] : server_.options_.team_tokens) known = known || SameToken(token, t);
    return known;
  }

  kj::Promise<void> describe(DescribeContext context) override {
    auto results = context.getResults();
    if (!Known(context.getParams().getToken())) {
      rpc::EncodeStatus(absl::UnauthenticatedError("describe needs a team's or the agents' token"), results.initStatus());
      return kj::READY_NOW;
    }
    results.setReport(server_.Report());
    rpc::EncodeStatus(absl::OkStatus(), results.initStatus());
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

absl::Status PoolServer::Impl::AuthenticateAgent(const std::string& token) const {
  if (options_.agent_token.empty()) return absl::UnauthenticatedError("this pool accepts no node agents");
  if (!SameToken(token, options_.agent_token)) return absl::UnauthenticatedError("wrong agent token");
  return absl::OkStatus();
}

absl::StatusOr<std::string> PoolServer::Impl::RegisterAgent(capnp::Data::Reader inventory, AgentSessionImpl* agent) {
  absl::StatusOr<rpc::DiscoveredPool> sent = rpc::DecodeNodes(
      absl::string_view(reinterpret_cast<const char*>(inventory.begin()), inventory.size()));
  if (!sent.ok()) return sent.status();
  if (sent->nodes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("an agent registers exactly one node, not ", sent->nodes.size()));
  }
  const pool::DiscoveredNode& node = sent->nodes[0];
  const pool::InventoryNode* known = nullptr;
  for (const pool::InventoryNode& n : pool_->inventory().nodes()) {
    if (n.name == node.name) known = &n;
  }
  if (known == nullptr) {
    return absl::NotFoundError(absl::StrCat("node '", node.name, "' is not in this pool's configuration"));
  }
  // The node must be what the head was configured with, or leases would promise GPUs that are
  // not there (as Slurm drains a node whose registration disagrees with slurm.conf).
  if (known->gpu_positions.size() != node.gpus.size()) {
    return absl::FailedPreconditionError(absl::StrCat("node '", node.name, "' reports ", node.gpus.size(),
                                                      " GPUs; the pool has ", known->gpu_positions.size()));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const pool::DiscoveredGpu& have = pool_->inventory().gpus()[known->gpu_positions[i]].device;
    if (have.index != node.gpus[i].index || have.model != node.gpus[i].model) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node '", node.name, "' reports GPU ", node.gpus[i].index, " as '", node.gpus[i].model,
          "'; the pool has GPU ", have.index, " as '", have.model, "'"));
    }
  }
  // One agent per node. A second one waits (Unavailable: `gpupool agent` retries) until the first
  // has gone or fallen silent; taking over from a live agent would leave the node down for good
  // once the newcomer left, with the first one still heartbeating unheard.
  if (auto current = agents_.find(node.name); current != agents_.end() && !current->second.silent) {
    return absl::UnavailableError(absl::StrCat("node '", node.name,
                                               "' already has a live agent; a second one is taken once the "
                                               "first has gone or missed its heartbeats"));
  }
  agents_[node.name] = Agent{agent, std::chrono::steady_clock::now(), false};
  absl::Status up = pool_->NodeUp(node.name);
  if (!up.ok()) return up;
  return node.name;
}

void PoolServer::Impl::AgentGone(const std::string& node, AgentSessionImpl* agent, const std::string& why) {
  auto it = agents_.find(node);
  if (it == agents_.end() || it->second.session != agent) return;  // replaced by a newer agent
  agents_.erase(it);
  (void)pool_->NodeDown(node, why);
}

void PoolServer::Impl::Heartbeat(const std::string& node, AgentSessionImpl* agent) {
  auto it = agents_.find(node);
  if (it == agents_.end() || it->second.session != agent) return;
  it->second.last_heartbeat = std::chrono::steady_clock::now();
  if (it->second.silent) {
    it->second.silent = false;
    (void)pool_->NodeUp(node);
  }
}

kj::Promise<void> PoolServer::Impl::WatchHeartbeats(kj::Timer& timer) {
  auto period = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10), options_.heartbeat_timeout / 4);
  return timer.afterDelay(period.count() * kj::MILLISECONDS).then([this, &timer] {
    auto now = std::chrono::steady_clock::now();
    for (auto& [node, agent] : agents_) {
      if (agent.silent || now - agent.last_heartbeat < options_.heartbeat_timeout) continue;
      agent.silent = true;
      (void)pool_->NodeDown(node, absl::StrCat("no heartbeat from its agent for ",
                                               options_.heartbeat_timeout.count(), " ms"));
    }
    return WatchHeartbeats(timer);
  });
}

std::string PoolServer::Impl::TeamOfRequest(const std::string& request_id) const {
  if (auto it = by_request_.find(request_id); it != by_request_.end()) return it->second->team();
  const ReclaimBook::KeptRequest* kept = kept_.FindRequest(request_id);
  return kept == nullptr ? std::string() : kept->team;
}

std::string PoolServer::Impl::Report() {
  using nlohmann::json;
  PoolService& pool = *pool_;
  std::vector<pool::Lease> leases = pool.Leases();
  std::map<std::string, std::vector<const pool::Lease*>> on_gpu;
  for (const pool::Lease& l : leases) {
    for (const pool::GpuRef& g : l.gpus) on_gpu[absl::StrCat(g.node, "/", g.index)].push_back(&l);
  }
  json nodes = json::array();
  for (const pool::InventoryNode& node : pool.inventory().nodes()) {
    json gpus = json::array();
    for (size_t position : node.gpu_positions) {
      const pool::InventoryGpu& gpu = pool.inventory().gpus()[position];
      json held = json::array();
      for (const pool::Lease* l : on_gpu[absl::StrCat(gpu.ref.node, "/", gpu.ref.index)]) held.push_back(l->id);
      gpus.push_back({{"index", gpu.ref.index}, {"model", gpu.device.model}, {"memory_mib", gpu.device.memory_mib},
                      {"health", std::string(pool::HealthStateName(pool.health(gpu.ref)))}, {"leases", held}});
    }
    auto agent = agents_.find(node.name);
    bool remote = pool.driver() == nullptr;
    std::string state = !remote ? "local" : agent == agents_.end() ? "down" : agent->second.silent ? "silent" : "up";
    nodes.push_back({{"name", node.name}, {"agent", state}, {"up", pool.node_up(node.name)}, {"gpus", gpus}});
  }
  json held = json::array();
  for (const pool::Lease& l : leases) {
    json where = json::array();
    for (const pool::GpuRef& g : l.gpus) where.push_back(absl::StrCat(g.node, "/", g.index));
    held.push_back({{"lease", l.id}, {"team", l.request.team}, {"project", l.request.project},
                    {"priority_class", l.request.priority_class}, {"gpus", where},
                    {"gpu_share", static_cast<double>(l.milli) / 1000.0}, {"borrowing", l.borrowing},
                    {"started_s", l.started_s}, {"last_checkpoint_s", l.last_checkpoint_s},
                    {"revoking", l.revoke_deadline_s.has_value()}, {"job_away", kept_.KeepsLease(l.id)}});
  }
  json pending = json::array();
  for (const pool::PendingInfo& p : pool.Pending()) {
    pending.push_back({{"request", p.request_id}, {"team", TeamOfRequest(p.request_id)},
                       {"reason", std::string(pool::WaitReasonName(p.reason))}, {"submitted_s", p.submitted_s},
                       {"job_away", kept_.FindRequest(p.request_id) != nullptr}});
  }
  json report = {{"pool_time_s", pool.Now()}, {"driver", pool.driver_name()}, {"capacity_gpus", pool.capacity_gpus()},
                 {"nodes", nodes}, {"leases", held}, {"pending", pending}};
  return report.dump();
}

std::string PoolServer::Impl::Usage(double from_s, double to_s, const std::string& group_by, absl::Status* st) {
  if (journal_ == nullptr) {
    *st = absl::FailedPreconditionError("this head keeps no journal (start it with --journal PATH)");
    return "";
  }
  const std::pair<const char*, UsageGroup> groups[] = {{"team", UsageGroup::kTeam},
                                                       {"project", UsageGroup::kProject},
                                                       {"class", UsageGroup::kPriorityClass},
                                                       {"workload", UsageGroup::kWorkloadClass},
                                                       {"model", UsageGroup::kGpuModel}};
  const UsageGroup* group = nullptr;
  for (const auto& [name, g] : groups) {
    if (group_by == name) group = &g;
  }
  if (group == nullptr) {
    *st = absl::InvalidArgumentError(absl::StrCat("cannot group usage by '", group_by,
                                                  "' (team, project, class, workload or model)"));
    return "";
  }
  if (absl::Status flushed = journal_->Flush(); !flushed.ok()) {
    *st = flushed;
    return "";
  }
  absl::StatusOr<std::vector<UsageRow>> rows = journal_->Usage(from_s, to_s, *group);
  if (!rows.ok()) {
    *st = rows.status();
    return "";
  }
  nlohmann::json out = nlohmann::json::array();
  for (const UsageRow& r : *rows) out.push_back({{"group", r.group}, {"gpu_hours", r.gpu_hours}, {"leases", r.leases}});
  *st = absl::OkStatus();
  return out.dump();
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
  kj::Maybe<kj::Promise<void>> wait;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (queue_.empty()) {
      auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
      wake_ = kj::mv(paf.fulfiller);
      wait = kj::mv(paf.promise);
    }
  }
  KJ_IF_MAYBE(w, wait) {
    return w->then([this] { return PumpEvents(); });
  }
  HandleQueued();
  return kj::evalLater([this] { return PumpEvents(); });
}

void PoolServer::Impl::HandleQueued() {
  std::deque<PoolEvent> batch;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    batch.swap(queue_);
  }
  for (PoolEvent& e : batch) Handle(e);
}

void PoolServer::Impl::ScheduleSoon() {
  if (cycle_soon_) return;
  cycle_soon_ = true;
  // Detached: a cycle still waiting when the loop stops is dropped with it.
  kj::evalLast([this] {
    cycle_soon_ = false;
    pool_->ScheduleNow();  // its listener calls queue events (Push) on this thread
    HandleQueued();
  }).detach([](kj::Exception&& e) {
    std::fprintf(stderr, "gpupool head: scheduling cycle failed: %s\n", e.getDescription().cStr());
  });
}

void PoolServer::Impl::Handle(PoolEvent& e) {
  if (e.kind == PoolEvent::kGranted) {
    auto it = by_request_.find(e.lease.request.id);
    if (it == by_request_.end()) {
      if (kept_.Granted(e.lease)) {  // its job is away: the lease waits for it with its request
        JournalLease(e.lease, kept_.FindRequest(e.lease.request.id)->job_key);
        return;
      }
      (void)pool_->Release(e.lease.id);  // its session ended, or it was withdrawn meanwhile
      ScheduleSoon();
      return;
    }
    it->second->Granted(std::move(e.lease));
    return;
  }
  auto it = by_lease_.find(e.lease_id);
  if (it == by_lease_.end()) {
    // A lease kept for a job that is away: once lost, there is nothing to reclaim (a request
    // granted meanwhile is sent again by its job).
    if (e.kind == PoolEvent::kLost && kept_.Lost(e.lease_id)) JournalClose(e.lease_id, "lost");
    return;
  }
  if (e.kind == PoolEvent::kRevoked) {
    it->second->Revoked(e.lease_id, e.cause, e.deadline_s);
  } else {
    it->second->Lost(e.lease_id, e.why);
  }
}

kj::Promise<void> PoolServer::Impl::AcceptLoop(kj::ConnectionReceiver& listener, kj::TaskSet& tasks) {
  return listener.accept().then([this, &listener, &tasks](kj::Own<kj::AsyncIoStream>&& stream) {
    accepted_.fetch_add(1);
    int one = 1;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { stream->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); })) {
      (void)e;
    }
    capnp::ReaderOptions options;
    options.traversalLimitInWords = rpc::kMaxMessageWords;
    options.nestingLimit = 16;
    auto c = kj::heap<Connection>(kj::heap<rpc::ReadAheadStream>(kj::mv(stream)), KJ_ASSERT_NONNULL(bootstrap_), options);
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
  pool_->OwnerSchedules();
  auto stop = kj::newPromiseAndFulfiller<void>();
  stop_ = kj::mv(stop.fulfiller);
  bootstrap_ = capnp::Capability::Client(kj::heap<PoolServiceImpl>(*this));
  {
    kj::TaskSet tasks(*this);
    tasks.add(AcceptLoop(*listener, tasks));
    tasks.add(PumpEvents());
    tasks.add(WatchHeartbeats(io.provider->getTimer()));
    if (journal_ != nullptr) tasks.add(GiveBackExpired(io.provider->getTimer()));
    started.set_value(absl::OkStatus());
    stop.promise.wait(io.waitScope);
  }  // connections close here; their sessions give back what they held
  bootstrap_ = nullptr;
  agents_.clear();
  std::lock_guard<std::mutex> lock(queue_mu_);
  queue_closed_ = true;
  queue_.clear();
  wake_ = nullptr;
}

absl::Status PoolServer::Impl::Start() {
  bool loopback = false;
  for (const char* ok : {"127.0.0.1", "localhost", "::1"}) loopback |= options_.address == ok;
  if (!loopback && !options_.allow_network) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the pool server listens on loopback unless told it may use the network; got '", options_.address,
        "' (gpupool head --insecure-network, or --gpupool-head-listen under mpirun: tokens travel unencrypted)"));
  }
  if (absl::Status st = OpenJournal(); !st.ok()) return st;
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
    executor_->executeSync([this] {
      stopping_ = true;  // the sessions closing now keep their jobs' leases (see ~SessionImpl)
      stop_->fulfill();
    });
    thread_.join();
  }
  pool_.reset();  // stops the pool's thread: no listener call reaches this object afterwards
  journal_.reset();  // commits what is queued
}

absl::StatusOr<std::unique_ptr<PoolServer>> PoolServer::Start(std::unique_ptr<PoolService> pool,
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
PoolService& PoolServer::pool() { return *impl_->pool_; }
uint64_t PoolServer::connections_accepted() const { return impl_->accepted_.load(); }
std::string PoolServer::Report() { return impl_->ReportFromAnyThread(); }
size_t PoolServer::agents_connected() { return impl_->AgentsUp(); }

}  // namespace gpupool::runtime
