// File: runtime/service/worker_jobs.h
//
// Which session speaks for each job that has asked for workers, and on which nodes its workers
// were started: what the head needs to stop a job's workers when its session ends, and to keep
// one job (or team) from stopping another's. Internal to the service's RPC server.
//
//   WorkerJobs workers;
//   absl::Status st = workers.Claim("job-7", job_key, session);   // the session's first startWorker
//   workers.AddNode("job-7", "node-1");                           // before asking node-1's agent
//   for (const std::string& node : workers.Release("job-7", session)) { /* stopJob there */ }
//
// A job id belongs to one live session at a time: the first session to start a worker of it.
// Another session may take it over only when it presents the same (non-empty) job key: the same
// job, back on a new connection; the old session's end then stops nothing.
//
// A session whose job may come back (its connection dropped; the head keeps its leases for the
// reclaim window) hands its job's workers over to the window instead of stopping them: they run
// on, serving the driver they are connected to, and the job takes them back when it reclaims on a
// new session (Adopt) or starts another worker (Claim). Past the window nobody speaks for them and
// they are stopped (TakeExpired). A driver that really died is not waited for: its workers lose
// their connection to it and leave by themselves (WorkerHost), this is the head's backstop.
//
//   workers.KeepFor("job-7", session, until);                    // the session ends, the job may return
//   std::string job = workers.Adopt(job_key, new_session);       // it did: "job-7", its workers kept
//   for (auto& [job, nodes] : workers.TakeExpired(now)) { ... }  // it did not: stop them
//
// Threads: the server's loop thread only.
// Thread confinement, unchecked: no lock guards this state and clang's analysis (which checks
// locks) does not see it; only PoolServer::Impl's loop_ (ThreadConfined) marks the thread. A call
// from any other thread is a data race.
#ifndef GPUPOOL_RUNTIME_SERVICE_WORKER_JOBS_H_
#define GPUPOOL_RUNTIME_SERVICE_WORKER_JOBS_H_

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"

namespace gpupool::runtime {

class JobSession;

class WorkerJobs {
 public:
  // `session` (with `job_key`, "" for none) speaks for `job` from now on. PermissionDenied when a
  // live session of another job (another key, or none) already does.
  absl::Status Claim(const std::string& job, const std::string& job_key, const JobSession* session);
  // A worker of `job` is being started on `node` (recorded before the agent answers, so that a
  // session that ends meanwhile still stops it).
  void AddNode(const std::string& job, const std::string& node);
  // `session` ends (or its job leaves): the nodes where its job has workers, to be stopped, and
  // the job is forgotten. Nothing when another session has taken the job over.
  std::set<std::string> Release(const std::string& job, const JobSession* session);

  // `session` ends and its job may come back: its workers are kept until `until` for a session of
  // the same job key. False (nothing kept: stop them now) when the job has no key or another
  // session speaks for it.
  using Clock = std::chrono::steady_clock;
  bool KeepFor(const std::string& job, const JobSession* session, Clock::time_point until);
  // The job of `job_key`, its workers kept or still held by its older session: `session` speaks
  // for them from now on. Its id, or "" when there is none for that key.
  std::string Adopt(const std::string& job_key, const JobSession* session);
  // Jobs kept past their time, each with the nodes where it has workers (forgotten here).
  std::map<std::string, std::set<std::string>> TakeExpired(Clock::time_point now);

  size_t size() const { return jobs_.size(); }

 private:
  struct Job {
    const JobSession* owner = nullptr;  // null while kept
    std::string job_key;
    std::set<std::string> nodes;
    Clock::time_point kept_until{};     // while kept (owner null)
  };
  std::map<std::string, Job> jobs_;  // by job id
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_WORKER_JOBS_H_
