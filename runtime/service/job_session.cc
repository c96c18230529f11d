#include "runtime/service/job_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/task_key.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/rpc/worker_launch_codec.h"
#include "runtime/service/pool_ids.h"

namespace gpupool::runtime {
namespace {

constexpr size_t kMaxCheckpointPathBytes = 4096;  // PATH_MAX
constexpr size_t kMaxCheckpointKeysPerSession = 100000;  // tasks with live checkpoints, per job

}  // namespace

void DeliverPoolEvent(const JobSessionDeps& deps, PoolEvent& e) {
  if (e.kind == PoolEvent::kGranted) {
    auto it = deps.sessions.by_request().find(e.lease.request.id);
    if (it == deps.sessions.by_request().end()) {
      if (deps.durable.kept().Granted(e.lease)) {  // its job is away: the lease waits for it with its request
        deps.durable.JournalLease(e.lease, deps.durable.kept().FindRequest(e.lease.request.id)->job_key);
        return;
      }
      (void)deps.pool.Release(e.lease.id);  // its session ended, or it was withdrawn meanwhile
      deps.pump.ScheduleSoon();
      return;
    }
    it->second->Granted(std::move(e.lease));
    return;
  }
  auto it = deps.sessions.by_lease().find(e.lease_id);
  if (it == deps.sessions.by_lease().end()) {
    if (e.kind == PoolEvent::kLost && deps.agents.DiagnosticLost(e.lease_id, e.why)) return;
    // A lease kept for a job that is away: once lost, there is nothing to reclaim (a request
    // granted meanwhile is sent again by its job).
    if (e.kind == PoolEvent::kLost && deps.durable.kept().Lost(e.lease_id)) {
      deps.durable.JournalClose(e.lease_id, "lost");
    }
    return;
  }
  if (e.kind == PoolEvent::kRevoked) {
    it->second->Revoked(e.lease_id, e.cause, e.deadline_s);
  } else {
    it->second->Lost(e.lease_id, e.why);
  }
}

JobSession::JobSession(const JobSessionDeps& deps, std::string team, std::string token, std::string job_key)
    : deps_(deps), team_(std::move(team)), token_(std::move(token)), job_key_(std::move(job_key)),
      prefix_(SessionPrefix(deps_.sessions.NextSessionNumber())) {
  deps_.sessions.NewSession(job_key_, this);
}

JobSession::~JobSession() {
  const bool newest = deps_.sessions.EndSession(job_key_, this);
  // The head is stopping, not the job: with a journal, its leases and queued requests stay
  // there for the next run to take back and the job to reclaim (its tasks run on, its requests
  // keep their place). The pool goes with the head.
  // (Its workers are not stopped then either: the agents lose the head too and stop them.)
  if (deps_.sessions.stopping()) {
    for (auto& [client_id, p] : pending_) deps_.sessions.by_request().erase(p.pool_id);
    for (auto& [id, listener] : leases_) deps_.sessions.by_lease().erase(id);
    return;
  }
  // A job that may come back (it has a key) finds its leases and requests kept for the reclaim
  // window: a lost connection is not a dead job. Its tasks run on meanwhile, and its requests
  // keep their place in the queue (a grant meanwhile is kept for it too). Not when the job is
  // back already on a newer session: it has reclaimed what it could, and holds the rest lost.
  if (!job_key_.empty() && !leaving_ && newest && deps_.durable.journal() != nullptr) {
    const auto until = deps_.durable.KeepUntil();
    // Its workers too: they run on for the driver they serve, which takes them back with its
    // leases (reclaim); past the window they are stopped (PoolServer's StopUnclaimedWorkers), a
    // little before the leases go back (the agent's SIGTERM, SIGKILL a second later), so a GPU
    // handed to another job is not still running this job's task.
    const std::chrono::milliseconds margin =
        std::min<std::chrono::milliseconds>(std::chrono::seconds(2), deps_.durable.reclaim_window() / 2);
    if (!worker_job_.empty() && !deps_.workers.KeepFor(worker_job_, this, until - margin)) StopWorkers();
    for (auto& [client_id, p] : pending_) {
      deps_.sessions.by_request().erase(p.pool_id);
      deps_.durable.kept().KeepRequest(p.pool_id, ReclaimBook::KeptRequest{.job_key = job_key_,
                                                                           .client_id = client_id,
                                                                           .team = p.team,
                                                                           .until = until});
    }
    for (auto& [id, listener] : leases_) {
      deps_.sessions.by_lease().erase(id);
      deps_.durable.kept().KeepLease(id, job_key_, until);
    }
    return;
  }
  // The job is gone: its workers are stopped, and what it asked for goes back to the pool. A
  // grant already queued for a withdrawn request finds no session and is released by the server.
  StopWorkers();
  for (auto& [client_id, p] : pending_) {
    deps_.sessions.by_request().erase(p.pool_id);
    (void)deps_.pool.Withdraw(p.pool_id);
    if (deps_.durable.journal() != nullptr) deps_.durable.journal()->RemoveRequest(p.pool_id);
  }
  for (auto& [id, listener] : leases_) {
    deps_.sessions.by_lease().erase(id);
    (void)deps_.pool.Release(id);
    deps_.pump.ScheduleSoon();
    deps_.durable.JournalClose(id, "job disconnected");
  }
}

kj::Promise<void> JobSession::request(RequestContext context) {
  auto params = context.getParams();
  std::string pool_id, team, journaled;
  absl::Status st = DoRequest(params.getRequest(), params.getListener(), &pool_id, &team,
                              deps_.durable.journal() != nullptr ? &journaled : nullptr);
  std::optional<pool::Lease> granted;
  if (st.ok() && deps_.durable.journal() == nullptr && deps_.pool.pending_requests() == 1) {
    // Nothing else waits, so a cycle now costs one decision: when it admits the request, the
    // answer carries the lease. (With others waiting, the cycle after this turn decides for
    // all of them at once. With a journal the answer waits for the disk, and the grant
    // should not: the listener hears of it.)
    answering_ = pool_id;
    deps_.pump.ScheduleNow();
    answering_.clear();
    granted = std::move(answered_grant_);
    answered_grant_.reset();
  }
  if (!st.ok() || deps_.durable.journal() == nullptr) {
    auto results = context.getResults();
    rpc::EncodeStatus(st, results.initStatus());
    if (granted.has_value()) rpc::EncodeLease(*granted, results.initGranted());
    return kj::READY_NOW;
  }
  // Acknowledged once durable: a head killed after this reply still knows the request.
  // With the job's key, so that a restarted head queues it again for that job.
  JournalTicket t = deps_.durable.journal()->RecordRequest(RequestRecord{.request_id = pool_id,
                                                                         .job_id = job_key_,
                                                                         .team = team,
                                                                         .request = std::move(journaled),
                                                                         .submitted_s = WallSeconds()});
  return deps_.durable.Durable(t).then([context](absl::Status durable) mutable {
    rpc::EncodeStatus(durable, context.getResults().initStatus());
  });
}

kj::Promise<void> JobSession::withdraw(WithdrawContext context) {
  absl::Status st;
  std::string id = context.getParams().getRequestId();
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    st = absl::NotFoundError(absl::StrCat("request '", id, "' is not pending in this session"));
  } else {
    const std::string pool_id = it->second.pool_id;
    st = deps_.pool.Withdraw(pool_id);
    pending_.erase(it);
    deps_.sessions.by_request().erase(pool_id);
    if (deps_.durable.journal() != nullptr) deps_.durable.journal()->RemoveRequest(pool_id);
  }
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> JobSession::release(ReleaseContext context) {
  absl::Status st;
  std::string id = context.getParams().getLeaseId();
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    st = NotHeld(id);
  } else {
    st = deps_.pool.Release(id);
    deps_.pump.ScheduleSoon();
    leases_.erase(it);
    deps_.sessions.by_lease().erase(id);
    if (deps_.durable.journal() != nullptr) {
      // What the job says its tasks used, in pool seconds: the ledger keeps real ones. An older
      // client sends the default, -1 (unknown); the journal caps it at what the lease held.
      const double busy = context.getParams().getBusyGpuSeconds();
      JournalTicket t = deps_.durable.journal()->CloseLease(
          id, WallSeconds(), "released", std::isfinite(busy) && busy >= 0 ? busy / deps_.pool.clock_speed() : -1);
      return deps_.durable.Durable(t).then([context, st](absl::Status durable) mutable {
        rpc::EncodeStatus(st.ok() ? durable : st, context.getResults().initStatus());
      });
    }
  }
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> JobSession::checkpointed(CheckpointedContext context) {
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
    deps_.pool.Checkpointed(id, CheckpointNote{key, params.getVersion(), params.getStep(), params.getPath()});
    if (deps_.durable.journal() != nullptr) {
      if (checkpoint_keys_.size() >= kMaxCheckpointKeysPerSession && checkpoint_keys_.count(key) == 0) {
        rpc::EncodeStatus(absl::ResourceExhaustedError(absl::StrCat(
                              "this session already indexes ", kMaxCheckpointKeysPerSession, " tasks' checkpoints")),
                          context.getResults().initStatus());
        return kj::READY_NOW;
      }
      checkpoint_keys_.insert(key);
      JournalTicket t = deps_.durable.journal()->RecordCheckpoint(CheckpointRecord{
          .task_key = key, .job_id = IndexOwner(), .version = static_cast<int64_t>(params.getVersion()),
          .path = params.getPath(), .step = params.getStep(), .committed_s = WallSeconds()});
      return deps_.durable.Durable(t).then([context](absl::Status durable) mutable {
        rpc::EncodeStatus(durable, context.getResults().initStatus());
      });
    }
  }
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> JobSession::forgetCheckpoints(ForgetCheckpointsContext context) {
  std::string key = context.getParams().getTaskKey();
  absl::Status st;
  if (checkpoint_keys_.erase(key) == 0 && !RecordedByThisJob(key)) {
    st = absl::NotFoundError(absl::StrCat("this job recorded no checkpoint of '", key, "'"));
  } else if (deps_.durable.journal() != nullptr) {
    JournalTicket t = deps_.durable.journal()->RemoveCheckpoints(key);
    return deps_.durable.Durable(t).then([context](absl::Status durable) mutable {
      rpc::EncodeStatus(durable, context.getResults().initStatus());
    });
  }
  rpc::EncodeStatus(st, context.getResults().initStatus());
  return kj::READY_NOW;
}

kj::Promise<void> JobSession::reclaim(ReclaimContext context) {
  // Revocations the pool made while nobody held the lease are told to the job now.
  std::map<std::string, int64_t> revoking;
  for (const pool::Lease& l : deps_.pool.Leases()) {
    if (l.revoke_deadline_s.has_value()) revoking[l.id] = *l.revoke_deadline_s;
  }
  auto params = context.getParams();
  // Only the job that held them: the key it presented then and now (a job of the same team
  // cannot take another's lease, whose id `gpupool queue` shows). TakeLease and TakeRequest
  // match nothing for a job without a key.
  // The workers its last session left running are this session's to stop from now on.
  if (worker_job_.empty()) worker_job_ = deps_.workers.Adopt(job_key_, this);
  std::vector<std::string> kept;
  for (rpc::HeldLease::Reader held : params.getLeases()) {
    std::string id = held.getLeaseId();
    if (!deps_.durable.kept().TakeLease(id, job_key_)) continue;  // released meanwhile, or never kept
    AdoptLease(id, held.getListener());
    kept.push_back(id);
  }
  std::vector<std::string> queued;
  std::vector<pool::Lease> granted_while_away;
  for (rpc::QueuedRequest::Reader waiting : params.getRequests()) {
    std::string client_id = waiting.getRequestId();
    if (pending_.count(client_id) != 0) continue;  // sent again on this session already
    auto taken = deps_.durable.kept().TakeRequest(job_key_, client_id);
    if (!taken.has_value()) continue;  // granted and lost meanwhile, or never kept: sent again
    auto& [pool_id, request] = *taken;
    if (request.granted.has_value()) {
      AdoptLease(request.granted->id, waiting.getListener());
      granted_while_away.push_back(*std::move(request.granted));
      granted_while_away.back().request.id = client_id;
    } else {
      pending_.emplace(client_id, Pending{pool_id, request.team, waiting.getListener()});
      deps_.sessions.by_request()[pool_id] = this;
    }
    queued.push_back(client_id);
  }
  // What the job did not name, it no longer holds or wants (released or withdrawn while it
  // was away): back to the pool now rather than at the end of the window.
  deps_.durable.GiveBack(deps_.durable.kept().TakeRest(job_key_), "not reclaimed by its job when it came back");
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

void JobSession::AdoptLease(const std::string& id, rpc::LeaseListener::Client listener) {
  leases_.insert_or_assign(id, kj::mv(listener));
  deps_.sessions.by_lease()[id] = this;
}

absl::Status JobSession::NotHeld(const std::string& id) const {
  return deps_.sessions.by_lease().count(id) != 0
             ? absl::PermissionDeniedError(absl::StrCat("lease '", id, "' is not held by this session"))
             : absl::NotFoundError(absl::StrCat("lease '", id, "' is not held"));
}

bool JobSession::RecordedByThisJob(const std::string& key) {
  if (job_key_.empty() || deps_.durable.journal() == nullptr) return false;
  absl::StatusOr<std::vector<CheckpointRecord>> history = deps_.durable.journal()->CheckpointHistory(key);
  return history.ok() && !history->empty() && history->back().job_id == job_key_;
}

kj::Promise<void> JobSession::leave(LeaveContext) {
  leaving_ = true;
  StopWorkers();  // the job is ending: its workers have nothing more to do
  return kj::READY_NOW;
}

absl::Status JobSession::CheckLaunch(const WorkerLaunch& launch) {
  if (launch.job.empty()) return absl::InvalidArgumentError("a worker launch names no job");
  if (launch.executable.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("a worker launch for node '", launch.node, "' names no executable"));
  }
  if (launch.secret.empty()) {
    return absl::InvalidArgumentError("a worker launch carries no secret: the worker could not tell its job's peers");
  }
  if (rpc::DiscoveredNodes(deps_.pool.inventory(), launch.node).empty()) {
    return absl::NotFoundError(absl::StrCat("node '", launch.node, "' is not in this pool"));
  }
  // One job per session: its end stops that job's workers, so it must not name another's.
  if (!worker_job_.empty() && worker_job_ != launch.job) {
    return absl::PermissionDeniedError(absl::StrCat("this session starts workers of job '", worker_job_,
                                                    "'; it cannot start workers of job '", launch.job, "'"));
  }
  if (worker_job_.empty()) {
    if (absl::Status st = deps_.workers.Claim(launch.job, job_key_, this); !st.ok()) return st;
    worker_job_ = launch.job;
  }
  return absl::OkStatus();
}

bool JobSession::HoldsLeaseOn(const std::string& node) const {
  for (const pool::Lease& l : deps_.pool.Leases()) {  // rare (a worker's start): a scan is fine
    if (!leases_.contains(l.id)) continue;
    for (const pool::GpuRef& g : l.gpus) {
      if (g.node == node) return true;
    }
  }
  return false;
}

void JobSession::StopWorkers() {
  if (worker_job_.empty()) return;
  for (const std::string& node : deps_.workers.Release(worker_job_, this)) deps_.agents.StopJob(node, worker_job_);
}

kj::Promise<void> JobSession::startWorker(StartWorkerContext context) {
  absl::StatusOr<WorkerLaunch> launch = rpc::DecodeWorkerLaunch(context.getParams().getLaunch());
  absl::Status st = launch.status();
  if (st.ok() && leaving_) st = absl::FailedPreconditionError("the job said it is leaving: no more workers");
  if (st.ok()) st = CheckLaunch(*launch);
  absl::StatusOr<rpc::AgentControl::Client> control =
      st.ok() ? deps_.agents.ControlOf(launch->node) : absl::StatusOr<rpc::AgentControl::Client>(st);
  if (control.ok() && !HoldsLeaseOn(launch->node)) {
    // The head asks an agent for a worker only where the job's tasks are placed: a team's token
    // cannot start processes on a node where its session holds no lease.
    control = absl::FailedPreconditionError(absl::StrCat(
        "this job holds no lease on node '", launch->node, "': a worker starts only where its job's tasks are placed"));
  }
  if (!control.ok()) {
    rpc::EncodeStatus(control.status(), context.getResults().initStatus());
    return kj::READY_NOW;
  }
  // Recorded before the agent answers: a session that ends meanwhile still stops this worker (the
  // agent hears stopJob after startWorker: calls on one capability arrive in order).
  deps_.workers.AddNode(launch->job, launch->node);
  const pool::Team* team = deps_.pool.config().scheduling.FindTeam(team_);
  auto req = control->startWorkerRequest();
  rpc::EncodeWorkerLaunch(*launch, req.initLaunch());
  req.setRunAs(team != nullptr ? team->run_as : std::string());
  req.setTeam(team_);
  return req.send().then(
      [context](capnp::Response<rpc::AgentControl::StartWorkerResults>&& resp) mutable {
        auto results = context.getResults();
        results.setStatus(resp.getStatus());
        results.setPid(resp.getPid());
      },
      [context, node = launch->node](kj::Exception&& e) mutable {
        rpc::EncodeStatus(StatusFromKj(e, absl::StrCat("the agent of node '", node, "'")),
                          context.getResults().initStatus());
      });
}

kj::Promise<void> JobSession::info(InfoContext context) {
  PoolService& pool = deps_.pool;
  auto info = context.getResults().initInfo();
  info.setPoolNowS(pool.Now());
  info.setClockSpeed(pool.clock_speed());
  info.setConfigYaml(pool.config_text());
  info.setCapacityGpus(pool.capacity_gpus());
  info.setDriver(pool.driver_name());
  info.setDurable(deps_.durable.journal() != nullptr);
  info.setReclaimWindowS(deps_.durable.journal() != nullptr && !job_key_.empty()
                             ? static_cast<double>(deps_.durable.reclaim_window().count()) / 1000.0
                             : 0.0);
  return kj::READY_NOW;
}

kj::Promise<void> JobSession::describeNode(DescribeNodeContext context) {
  std::string name = context.getParams().getName();
  rpc::DiscoveredPool one{deps_.pool.driver_name(), rpc::DiscoveredNodes(deps_.pool.inventory(), name)};
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

void JobSession::Granted(pool::Lease lease) {
  std::optional<absl::string_view> client_id = ClientIdOf(lease.request.id);
  auto it = client_id.has_value() ? pending_.find(std::string(*client_id)) : pending_.end();
  if (it == pending_.end() || it->second.pool_id != lease.request.id) return;
  std::string client = it->first;
  Pending p = std::move(it->second);
  pending_.erase(it);
  deps_.sessions.by_request().erase(lease.request.id);
  deps_.sessions.by_lease()[lease.id] = this;
  deps_.durable.JournalLease(lease, job_key_);  // what reclaims it after a restart
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

void JobSession::Revoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  auto req = it->second.revokedRequest();
  req.setLeaseId(lease_id);
  req.setCause(rpc::EncodeRevokeCause(cause));
  req.setDeadlineS(deadline_s);
  req.send().detach([](kj::Exception&&) {});
}

void JobSession::Lost(const std::string& lease_id, const std::string& why) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  auto req = it->second.lostRequest();
  req.setLeaseId(lease_id);
  req.setWhy(why);
  req.send().detach([](kj::Exception&&) {});
  leases_.erase(it);
  deps_.sessions.by_lease().erase(lease_id);
  deps_.durable.JournalClose(lease_id, "lost");
}

absl::Status JobSession::DoRequest(rpc::LeaseRequest::Reader wire, rpc::LeaseListener::Client listener,
                                   std::string* pool_id_out, std::string* team_out, std::string* journaled) {
  absl::StatusOr<pool::LeaseRequest> r = rpc::DecodeLeaseRequest(wire);
  if (!r.ok()) return r.status();
  if (r->id.empty()) return absl::InvalidArgumentError("the request has no id");
  if (r->team.empty()) r->team = team_;
  if (r->team != team_ && !deps_.auth.Authenticate(r->team, token_).ok()) {
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
  deps_.sessions.by_request()[pool_id] = this;
  absl::Status st = deps_.pool.Request(*std::move(r), &deps_.pump);
  deps_.pump.ScheduleSoon();
  if (!st.ok()) {
    pending_.erase(client_id);
    deps_.sessions.by_request().erase(pool_id);
  }
  *pool_id_out = pool_id;
  return st;
}

}  // namespace gpupool::runtime
