// File: runtime/service/job_session.h
//
// A job's session with the head (rpc::Session): what a job gets once it authenticates as a team
// (PoolServiceRpc::authenticate). A session sees only its own requests and leases. Pool request
// ids are the job's ids prefixed with the session's (pool_ids.h). A request names the session's
// team, or another team whose token is the one the session presented (an mpirun job's head gives
// every team the job's token, so one job submits for several teams; a shared head gives each
// team its own). With a journal, a request, release or checkpoint is acknowledged only once it
// is durable.
//
// A session may ask a node's agent for a worker of its job (startWorker): the head checks the
// launch, adds the team's `run_as` user from its configuration, and forwards it to the node's
// live agent. A session starts workers of one job id only (the first it names; WorkerJobs keeps
// another session from naming it too), and when the session ends or its job leaves, the head
// tells each agent that started one of them to stop that job's workers.
//
// When a session ends (the job dropped it or its connection closed), what it held goes back to
// the pool, unless its job may come back (it presented a job key, the head keeps a journal, and
// it did not say it was leaving): then its leases and requests are kept for the reclaim window
// (HeadDurability::kept) for the job to reclaim on a new session (Session.reclaim).
//
//   auto session = kj::heap<JobSession>(deps, team, token, job_key);   // owned by the connection
//   DeliverPoolEvent(deps, event);   // the event pump's handler: a grant, revocation or loss
//                                    // reaches the session that holds the request or lease
//
// Threads: the server's loop thread only.
// Thread confinement, unchecked: no lock guards this state and clang's analysis (which checks
// locks) does not see it; only PoolServer::Impl's loop_ (ThreadConfined) marks the thread. A call
// from any other thread is a data race.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOB_SESSION_H_
#define GPUPOOL_RUNTIME_SERVICE_JOB_SESSION_H_

#include <map>
#include <optional>
#include <set>
#include <string>

#include <kj/async.h>

#include "absl/status/status.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/service/agent_registry.h"
#include "runtime/service/event_pump.h"
#include "runtime/service/head_auth.h"
#include "runtime/service/head_durability.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/session_directory.h"
#include "runtime/service/worker_jobs.h"

namespace gpupool::runtime {

// What every session works with. Owned by the server (PoolServer::Impl), which outlives every
// session: its destructor closes the connections, and so the sessions, before the rest goes.
struct JobSessionDeps {
  PoolService& pool;
  EventPump& pump;             // the pool's listener for the sessions' requests; runs cycles
  SessionDirectory& sessions;  // who holds what
  HeadDurability& durable;     // the journal and the leases kept for jobs that are away
  const HeadAuth& auth;        // for requests that name another team
  AgentRegistry& agents;       // the node agents that start workers
  WorkerJobs& workers;         // which session speaks for each job's workers, and where they are
  double history_interval_s = 0;  // how often the head samples its history (usage reads it); 0: never
};

// The pool told the server of a grant, revocation or loss (the event pump's handler): it goes
// to the session holding the request or lease, or to the book of what is kept for jobs that are
// away; a grant nobody waits for any more goes back to the pool.
void DeliverPoolEvent(const JobSessionDeps& deps, PoolEvent& e);

class JobSession final : public rpc::Session::Server {
 public:
  JobSession(const JobSessionDeps& deps, std::string team, std::string token, std::string job_key);
  // Gives back, keeps for the job, or (the head is stopping) leaves in the journal what the
  // session held; see the file comment.
  ~JobSession();

  // rpc::Session.
  kj::Promise<void> request(RequestContext context) override;
  kj::Promise<void> withdraw(WithdrawContext context) override;
  kj::Promise<void> release(ReleaseContext context) override;
  kj::Promise<void> checkpointed(CheckpointedContext context) override;
  kj::Promise<void> forgetCheckpoints(ForgetCheckpointsContext context) override;
  kj::Promise<void> reclaim(ReclaimContext context) override;
  kj::Promise<void> leave(LeaveContext) override;
  kj::Promise<void> info(InfoContext context) override;
  kj::Promise<void> describeNode(DescribeNodeContext context) override;
  kj::Promise<void> startWorker(StartWorkerContext context) override;

  const std::string& team() const { return team_; }

  // Called by DeliverPoolEvent (loop thread).
  void Granted(pool::Lease lease);
  void Revoked(const std::string& lease_id, pool::RevokeCause cause, double deadline_s);
  void Lost(const std::string& lease_id, const std::string& why);

 private:
  struct Pending {
    std::string pool_id;  // prefix_ + the job's id, or the id it had before a restart
    std::string team;     // the request's (the session's, or one its token also serves)
    rpc::LeaseListener::Client listener;
  };

  // Queues the request; `journaled`, when given, receives its bytes for the journal.
  absl::Status DoRequest(rpc::LeaseRequest::Reader wire, rpc::LeaseListener::Client listener, std::string* pool_id_out,
                         std::string* team_out, std::string* journaled);
  // A lease kept for this job is this session's from now on.
  void AdoptLease(const std::string& id, rpc::LeaseListener::Client listener);
  // Why this session cannot act on lease `id`: another session's (PermissionDenied), or nobody's.
  absl::Status NotHeld(const std::string& id) const;
  // Who the index says recorded a checkpoint: the job's key when it has one (it survives the
  // job's reconnections), else this session.
  std::string IndexOwner() const { return job_key_.empty() ? prefix_ : job_key_; }
  // An index entry this job recorded on an earlier connection (a read of the journal).
  bool RecordedByThisJob(const std::string& key);
  // Why the head will not forward `launch` (a field missing, an unknown node, another job's id),
  // or OK; binds the session to the launch's job on its first call.
  absl::Status CheckLaunch(const WorkerLaunch& launch);
  // Whether this session holds a lease with a GPU on `node` (where its workers may start).
  bool HoldsLeaseOn(const std::string& node) const;
  // Tells the agents that started this session's workers to stop them (once).
  void StopWorkers();

  const JobSessionDeps deps_;
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
  std::string worker_job_;  // the job whose workers this session starts ("" until its first)
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOB_SESSION_H_
