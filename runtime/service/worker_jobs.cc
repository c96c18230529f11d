#include "runtime/service/worker_jobs.h"

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

absl::Status WorkerJobs::Claim(const std::string& job, const std::string& job_key, const JobSession* session) {
  auto [it, fresh] = jobs_.try_emplace(job, Job{session, job_key, {}});
  if (fresh || it->second.owner == session) return absl::OkStatus();
  // The same job back on a new connection: it takes its workers with it (the old session, found
  // dead later, must not stop them).
  if (!job_key.empty() && it->second.job_key == job_key) {
    it->second.owner = session;
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

}  // namespace gpupool::runtime
