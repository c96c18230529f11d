#include "runtime/agent/health_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace gpupool::runtime {
namespace {

constexpr size_t kMaxOutput = 4096;

}  // namespace

absl::StatusOr<HealthCheckOutcome> RunHealthCheck(const std::string& program, std::chrono::milliseconds timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  char* argv[] = {const_cast<char*>(program.c_str()), nullptr};
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return absl::UnavailableError(absl::StrCat("cannot run the health-check program '", program, "': ",
                                               std::strerror(spawned)));
  }
  HealthCheckOutcome out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[1024];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      out.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;  // the deadline check above ends it
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the program (and whatever it started) closed its output
    if (out.output.size() < kMaxOutput) out.output.append(buf, std::min<size_t>(n, kMaxOutput - out.output.size()));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  out.output = std::string(absl::StripTrailingAsciiWhitespace(out.output));
  if (out.timed_out) {
    out.output = absl::StrCat("timed out after ", timeout.count() / 1000.0, " s", out.output.empty() ? "" : ": ",
                              out.output);
  } else if (!out.passed() && out.output.empty()) {
    out.output = WIFEXITED(status) ? absl::StrCat("exit status ", out.exit_code)
                                   : absl::StrCat("killed by signal ", WTERMSIG(status));
  }
  return out;
}

}  // namespace gpupool::runtime
