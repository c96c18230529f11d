#include "runtime/agent/worker_spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace gpupool::runtime {
namespace {

// A descriptor this process owns; closed when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    Reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~Fd() { Reset(-1); }
  int get() const { return fd_; }
  void Reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// `fd`, moved to a number of 3 or more when it landed on 0..2 (an agent started with stdin,
// stdout or stderr closed): the child replaces 0 with /dev/null and must not lose its pipes.
// CLOEXEC either way. -1 on failure (errno set).
int AboveStdio(int fd) {
  if (fd < 0 || fd >= 3) return fd;
  int up = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int saved = errno;
  ::close(fd);
  errno = saved;
  return up;
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status Pipe(Fd* read_end, Fd* write_end, const char* what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Errno(absl::StrCat("cannot make the ", what, " pipe"));
  read_end->Reset(AboveStdio(fds[0]));
  write_end->Reset(AboveStdio(fds[1]));
  if (read_end->get() < 0 || write_end->get() < 0) return Errno(absl::StrCat("cannot place the ", what, " pipe"));
  return absl::OkStatus();
}

// What the child reports through the status pipe when a step fails before exec replaced it.
enum ChildStep : int {
  kProcessGroup,
  kParentDeathSignal,
  kAgentGone,
  kStdin,
  kDescriptors,
  kGroups,
  kGid,
  kUid,
  kExec,
};
const char* StepName(int step) {
  switch (step) {
    case kProcessGroup: return "setting its process group";
    case kParentDeathSignal: return "setting its parent-death signal";
    case kAgentGone: return "starting (the agent died meanwhile)";
    case kStdin: return "opening stdin";
    case kDescriptors: return "closing the agent's descriptors";
    case kGroups: return "setting its groups";
    case kGid: return "setting its gid";
    case kUid: return "setting its uid";
    case kExec: return "exec";
    default: return "starting";
  }
}
struct ChildFailure {
  int step;
  int error;
};

// Everything the child needs, made before fork: after it, the child may not allocate.
struct ChildPlan {
  const char* executable;
  std::vector<char*> argv;  // null-terminated
  std::vector<char*> envp;  // null-terminated
  const char* cwd;          // "" for "/"
  const WorkerIdentity* as;
  pid_t agent;
  int dev_null;
  int secret_fd;
  int status_fd;
  int max_fd;  // for closing descriptors where close_range is missing
};

[[noreturn]] void Fail(const ChildPlan& plan, int step) {
  ChildFailure f{step, errno};
  ssize_t n;
  do {
    n = ::write(plan.status_fd, &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  ::_exit(127);
}

// The forked child: async-signal-safe calls only (see the file comment of worker_spawn.h).
[[noreturn]] void RunChild(const ChildPlan& plan) {
  // The agent's signal handling is not the worker's: ignored signals stay ignored across exec
  // (KJ ignores SIGPIPE) and so does a blocked mask (`gpupool agent` blocks SIGTERM to sigwait it).
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) (void)::sigaction(sig, &dfl, nullptr);  // SIGKILL/SIGSTOP fail: fine
  sigset_t none;
  sigemptyset(&none);
  (void)::sigprocmask(SIG_SETMASK, &none, nullptr);

  if (::setpgid(0, 0) != 0) Fail(plan, kProcessGroup);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Fail(plan, kParentDeathSignal);
  // The agent may have died between fork and prctl, before the signal was armed.
  if (::getppid() != plan.agent) Fail(plan, kAgentGone);

  if (::dup2(plan.dev_null, STDIN_FILENO) < 0) Fail(plan, kStdin);
  // No descriptor of the agent (its head connection, its other workers' pipes) reaches the worker
  // but the secret's: everything from 3 up closes at exec, then the secret's is kept open.
  bool marked = false;
#ifdef SYS_close_range
  constexpr unsigned kCloseRangeCloexec = 1U << 2;  // CLOSE_RANGE_CLOEXEC (Linux 5.11)
  marked = ::syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec) == 0;
#endif
  for (int fd = 3; !marked && fd < plan.max_fd; ++fd) (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (::fcntl(plan.secret_fd, F_SETFD, 0) != 0) Fail(plan, kDescriptors);

  if (plan.as->switch_user) {
    // initgroups would read /etc/group here (not async-signal-safe): the parent resolved them.
    if (::setgroups(plan.as->groups.size(), plan.as->groups.data()) != 0) Fail(plan, kGroups);
    if (::setgid(plan.as->gid) != 0) Fail(plan, kGid);
    if (::setuid(plan.as->uid) != 0) Fail(plan, kUid);
  }
  // After the user switch: the directory must be one the worker's user may enter.
  if (plan.cwd[0] == '\0' || ::chdir(plan.cwd) != 0) (void)::chdir("/");
  // Armed again after the user switch: changing the uid or gid clears the parent-death signal
  // (prctl(2)), so a run_as worker would otherwise outlive a killed agent.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Fail(plan, kParentDeathSignal);
  if (::getppid() != plan.agent) Fail(plan, kAgentGone);
  ::execve(plan.executable, plan.argv.data(), plan.envp.data());
  Fail(plan, kExec);
}

}  // namespace

absl::StatusOr<WorkerIdentity> ResolveUser(const std::string& name) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd entry;
  passwd* found = nullptr;
  int err;
  while ((err = ::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  if (err != 0) {
    return absl::UnavailableError(absl::StrCat("cannot look up user '", name, "': ", std::strerror(err)));
  }
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("there is no user '", name, "'"));
  WorkerIdentity as{.switch_user = true, .name = name, .uid = entry.pw_uid, .gid = entry.pw_gid, .groups = {}};
  int count = 32;
  for (int tries = 0; tries < 8; ++tries) {
    as.groups.resize(static_cast<size_t>(count));
    int n = count;
    if (::getgrouplist(name.c_str(), entry.pw_gid, as.groups.data(), &n) >= 0) {
      as.groups.resize(static_cast<size_t>(n));
      return as;
    }
    count = n > count ? n : count * 2;  // glibc says how many it needs
  }
  return absl::InternalError(absl::StrCat("cannot list the groups of user '", name, "'"));
}

absl::StatusOr<int> SpawnWorker(const WorkerLaunch& launch, const WorkerIdentity& as) {
  Fd secret_r, secret_w, status_r, status_w;
  if (absl::Status st = Pipe(&secret_r, &secret_w, "secret"); !st.ok()) return st;
  if (absl::Status st = Pipe(&status_r, &status_w, "status"); !st.ok()) return st;
  Fd dev_null(AboveStdio(::open("/dev/null", O_RDONLY | O_CLOEXEC)));
  if (dev_null.get() < 0) return Errno("cannot open /dev/null");
  // The secret waits in the pipe (a few KiB at most: the wire bounds it below the pipe's
  // capacity, so this never blocks) and the worker reads it to end of file.
  for (size_t done = 0; done < launch.secret.size();) {
    ssize_t n = ::write(secret_w.get(), launch.secret.data() + done, launch.secret.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot write the worker's secret");
    done += static_cast<size_t>(n);
  }
  secret_w.Reset(-1);

  std::vector<std::string> args;
  args.reserve(launch.args.size() + 2);
  args.push_back(launch.executable);
  args.insert(args.end(), launch.args.begin(), launch.args.end());
  args.push_back(absl::StrCat("--gpupool-worker-secret-fd=", secret_r.get()));
  std::map<std::string, std::string> env_map;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env_map.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  for (const auto& [name, value] : launch.env) env_map[name] = value;
  std::vector<std::string> env;
  env.reserve(env_map.size());
  for (const auto& [name, value] : env_map) env.push_back(absl::StrCat(name, "=", value));

  rlimit files{};
  ChildPlan plan{.executable = launch.executable.c_str(), .argv = {}, .envp = {}, .cwd = launch.cwd.c_str(),
                 .as = &as, .agent = ::getpid(), .dev_null = dev_null.get(), .secret_fd = secret_r.get(),
                 .status_fd = status_w.get(),
                 .max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < (1u << 20)
                               ? static_cast<int>(files.rlim_cur)
                               : (1 << 20)};
  for (std::string& a : args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  for (std::string& e : env) plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) return absl::ResourceExhaustedError(absl::StrCat("cannot fork a worker: ", std::strerror(errno)));
  if (pid == 0) RunChild(plan);

  // The parent: the child holds its ends now. End of file on the status pipe means exec closed
  // it (CLOEXEC): the worker runs. A report means it failed first, and has exited.
  secret_r.Reset(-1);
  status_w.Reset(-1);
  ChildFailure failure{};
  size_t got = 0;
  while (got < sizeof failure) {
    ssize_t n = ::read(status_r.get(), reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return static_cast<int>(pid);
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string why = got == sizeof failure
                        ? absl::StrCat(StepName(failure.step), ": ", std::strerror(failure.error))
                        : std::string("it exited before exec without saying why");
  std::string message = absl::StrCat("the worker ", launch.executable, " did not start on node ", launch.node,
                                     as.switch_user ? absl::StrCat(" as user '", as.name, "'") : std::string(),
                                     ": ", why);
  if (got == sizeof failure && failure.error == ENOENT) return absl::NotFoundError(message);
  return absl::FailedPreconditionError(message);
}

}  // namespace gpupool::runtime
