#include "runtime/agent/worker_launcher.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/agent/worker_spawn.h"

namespace gpupool::runtime {
namespace {

// How often exited workers are looked for: a stopped job's workers are gone from the process
// table within this of their exit (the head promises 2 s).
constexpr std::chrono::milliseconds kReapPeriod{50};

}  // namespace

WorkerLauncher::WorkerLauncher(WorkerLauncherOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

WorkerLauncher::~WorkerLauncher() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    for (auto& [pid, w] : workers_) Terminate(pid, w);
  }
  cv_.NotifyAll();
  thread_.join();  // once every worker is reaped
}

void WorkerLauncher::StartAsync(WorkerLaunch launch, std::string run_as, std::string team, Done done) {
  {
    MutexLock lock(&mu_);
    if (!stop_) {
      pending_.push_back(Pending{std::move(launch), std::move(run_as), std::move(team), std::move(done), ++seq_});
      cv_.NotifyAll();
      return;
    }
  }
  std::move(done)(absl::UnavailableError(absl::StrCat("the agent of node ", options_.node, " is stopping")));
}

void WorkerLauncher::StopJob(const std::string& job) {
  {
    MutexLock lock(&mu_);
    stopped_at_[job] = ++seq_;
    for (auto& [pid, w] : workers_) {
      if (w.job == job) Terminate(pid, w);
    }
  }
  cv_.NotifyAll();  // the launcher's thread now has a SIGKILL to schedule
}

std::vector<int> WorkerLauncher::WorkersOf(const std::string& job) const {
  MutexLock lock(&mu_);
  std::vector<int> pids;
  for (const auto& [pid, w] : workers_) {
    if (w.job == job) pids.push_back(pid);
  }
  return pids;
}

bool WorkerLauncher::StoppedSince(const Pending& p) const {
  auto it = stopped_at_.find(p.launch.job);
  return it != stopped_at_.end() && it->second > p.asked_at;
}

void WorkerLauncher::Terminate(int pid, Worker& w) {
  if (w.stopping) return;
  w.stopping = true;
  w.kill_at = std::chrono::steady_clock::now() + options_.stop_grace;
  (void)::killpg(pid, SIGTERM);  // the whole worker: its leading process and what it started
}

absl::StatusOr<int> WorkerLauncher::Spawn(const Pending& p) {
  const WorkerLaunch& launch = p.launch;
  if (launch.node != options_.node) {
    return absl::InvalidArgumentError(
        absl::StrCat("this agent serves node ", options_.node, ", not ", launch.node));
  }
  // The usual missing-binary mistakes are named here, before a fork, with the node: the job's
  // executable is re-executed on every node, which assumes a shared or identical filesystem.
  const std::string& path = launch.executable;
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("the worker executable '", path, "' is not an absolute path"));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(path, " does not exist on node ", options_.node));
    }
    return absl::FailedPreconditionError(absl::StrCat(path, " on node ", options_.node, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, " on node ", options_.node, " is not executable"));
  }

  // Who it runs as (see the file comment of worker_launcher.h).
  WorkerIdentity as;  // the agent's own user
  const uid_t euid = ::geteuid();
  if (!p.run_as.empty()) {
    absl::StatusOr<WorkerIdentity> user = ResolveUser(p.run_as);
    if (!user.ok()) {
      return absl::Status(user.status().code(),
                          absl::StrCat(user.status().message(), " on node ", options_.node, " (the run_as user of team ",
                                       p.team, ")"));
    }
    if (euid != 0 && user->uid != euid) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the agent of node ", options_.node, " runs as uid ", euid, ", not root: it cannot start team ", p.team,
          "'s workers as user '", p.run_as, "' (its run_as); run the agent as root or as that user"));
    }
    if (user->uid == 0 && !options_.allow_root_workers) {
      return absl::FailedPreconditionError(absl::StrCat(
          "team ", p.team, "'s run_as user '", p.run_as,
          "' is root; the agent starts root workers only when started with --allow-root-workers"));
    }
    if (user->uid != euid) as = *std::move(user);
  } else if (euid == 0 && !options_.allow_root_workers) {
    return absl::FailedPreconditionError(
        absl::StrCat("the agent runs as root; team ", p.team,
                     " has no run_as user in the configuration (or start the agent with --allow-root-workers)"));
  }
  return SpawnWorker(launch, as);
}

std::chrono::steady_clock::time_point WorkerLauncher::Tend() {
  const auto now = std::chrono::steady_clock::now();
  auto next = now + kReapPeriod;
  for (auto it = workers_.begin(); it != workers_.end();) {
    const int pid = it->first;
    Worker& w = it->second;
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    // WNOWAIT: an exited worker stays a zombie, holding its pid (and so its group's id) while
    // what it left in its group is killed; then it is reaped.
    int r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid) {
      (void)::killpg(pid, SIGKILL);
      int status;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      it = workers_.erase(it);
      continue;
    }
    if (r < 0 && errno == ECHILD) {  // reaped by someone else (a SIGCHLD set to SIG_IGN): not ours to signal
      it = workers_.erase(it);
      continue;
    }
    if (w.stopping) {
      if (now >= w.kill_at) {
        (void)::killpg(pid, SIGKILL);
        w.kill_at = now + kReapPeriod * 20;  // again later, should it somehow still be there
      }
      next = std::min(next, w.kill_at);
    }
    ++it;
  }
  return next;
}

void WorkerLauncher::Loop() {
  MutexLock lock(&mu_);
  bool stop_seen = false;
  while (true) {
    while (!pending_.empty()) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      absl::Status refused;
      if (stop_) refused = absl::UnavailableError(absl::StrCat("the agent of node ", options_.node, " is stopping"));
      if (StoppedSince(p)) {
        refused = absl::AbortedError(absl::StrCat("job ", p.launch.job, " was stopped before its worker started"));
      }
      lock.Unlock();
      absl::StatusOr<int> pid = refused.ok() ? Spawn(p) : absl::StatusOr<int>(refused);
      lock.Lock();
      if (pid.ok()) {
        Worker& w = workers_[*pid];
        w.job = p.launch.job;
        // The agent began to stop, or the job was stopped, while it started.
        if (stop_ || StoppedSince(p)) Terminate(*pid, w);
      }
      if (pending_.empty()) stopped_at_.clear();  // no start older than these stops is left
      lock.Unlock();
      std::move(p.done)(std::move(pid));
      lock.Lock();
    }
    auto next = Tend();
    if (stop_) {
      stop_seen = true;
      if (workers_.empty() && pending_.empty()) return;
    }
    cv_.WaitUntil(&mu_, next, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !pending_.empty() || (stop_ && !stop_seen);
    });
  }
}

}  // namespace gpupool::runtime
