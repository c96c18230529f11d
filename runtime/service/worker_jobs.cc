#include "runtime/service/worker_jobs.h"

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

absl::Status WorkerJobs::Claim(const std::string& job, const std::string& job_key, const JobSession* session) {
  auto [it, fresh] = jobs_.try_emplace(job, Job{.owner = session, .job_key = job_key});
  if (fresh || it->second.owner == session) return absl::OkStatus();
  // The same job back on a new connection: it takes its workers with it (the old session, found
  // dead later, must not stop them).
  if (!job_key.empty() && it->second.job_key == job_key) {
    it->second.owner = session;  // kept or not, it is this session's now
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "job '", job, "' already has workers started by another session; a session starts workers of its own job only"));
}

void WorkerJobs::AddNode(const std::string& job, const std::string& node) {
  if (auto it = jobs_.find(job); it != jobs_.end()) it->second.nodes.insert(node);
}

std::set<std::string> WorkerJobs::Release(const std::string& job, const JobSession* session) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.owner != session) return {};
  std::set<std::string> nodes = std::move(it->second.nodes);
  jobs_.erase(it);
  return nodes;
}

bool WorkerJobs::KeepFor(const std::string& job, const JobSession* session, Clock::time_point until) {
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.owner != session || it->second.job_key.empty()) return false;
  it->second.owner = nullptr;
  it->second.kept_until = until;
  return true;
}

std::string WorkerJobs::Adopt(const std::string& job_key, const JobSession* session) {
  if (job_key.empty()) return "";
  for (auto& [job, kept] : jobs_) {
    // Kept, or still held by the job's older session (a half-open connection the head has not
    // seen close yet: its end then stops nothing, as with Claim).
    if (kept.job_key == job_key) {
      kept.owner = session;
      return job;
    }
  }
  return "";
}

std::map<std::string, std::set<std::string>> WorkerJobs::TakeExpired(Clock::time_point now) {
  std::map<std::string, std::set<std::string>> expired;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second.owner == nullptr && it->second.kept_until <= now) {
      expired.emplace(it->first, std::move(it->second.nodes));
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

}  // namespace gpupool::runtime
