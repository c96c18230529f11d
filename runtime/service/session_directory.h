// File: runtime/service/session_directory.h
//
// Which job session holds each pool request and lease, the newest session of each job, and how
// sessions are numbered: the bookkeeping that the event pump's deliveries, the sessions
// themselves and the operators' report share. Internal to the service's RPC server.
//
//   SessionDirectory sessions;
//   std::string prefix = SessionPrefix(sessions.NextSessionNumber());   // "s<N>/"
//   sessions.by_request()[pool_id] = session;   // until granted, withdrawn or the session ends
//   sessions.by_lease()[lease_id] = session;    // until released, lost or the session ends
//
// Threads: the server's loop thread only (and the thread that starts the server, before the loop
// runs). It owns no session: each session enters and removes its own entries.
// Thread confinement, unchecked: no lock guards this state and clang's analysis (which checks
// locks) does not see it; only PoolServer::Impl's loop_ (ThreadConfined) marks the thread. A call
// from any other thread is a data race.
#ifndef GPUPOOL_RUNTIME_SERVICE_SESSION_DIRECTORY_H_
#define GPUPOOL_RUNTIME_SERVICE_SESSION_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>

namespace gpupool::runtime {

class JobSession;

class SessionDirectory {
 public:
  uint64_t NextSessionNumber() { return next_session_++; }
  // Sessions are numbered past those of the previous run ("s<N>/..."), so ids never repeat.
  void NumberSessionsPast(const std::string& id);  // a request or lease id

  // The newest session of each job key: an older one that ends (its connection found dead after
  // the job came back on a new one) keeps nothing for a reclaim that has already happened.
  void NewSession(const std::string& job_key, JobSession* session) {
    if (!job_key.empty()) newest_session_[job_key] = session;
  }
  // `session` ends: whether it was its job's newest.
  bool EndSession(const std::string& job_key, JobSession* session) {
    auto it = newest_session_.find(job_key);
    if (it == newest_session_.end() || it->second != session) return false;
    newest_session_.erase(it);
    return true;
  }

  // Who holds each pool request (by pool id) and lease (by lease id).
  std::map<std::string, JobSession*>& by_request() { return by_request_; }
  const std::map<std::string, JobSession*>& by_request() const { return by_request_; }
  std::map<std::string, JobSession*>& by_lease() { return by_lease_; }

  // The head itself is stopping: the sessions closing now keep their jobs' leases and requests
  // in the journal for the next run (see ~JobSession). Set once, by the server's destructor.
  void set_stopping() { stopping_ = true; }
  bool stopping() const { return stopping_; }

 private:
  uint64_t next_session_ = 1;
  std::map<std::string, JobSession*> newest_session_;  // by job key
  std::map<std::string, JobSession*> by_request_;
  std::map<std::string, JobSession*> by_lease_;
  bool stopping_ = false;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_SESSION_DIRECTORY_H_
