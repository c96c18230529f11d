// A stand-in for a job's worker, for the launch tests (worker_launch_test.cc): started by a node
// agent as a worker would be, it reads the secret from the descriptor named by
// --gpupool-worker-secret-fd=N, writes what it found into the file named by --out=PATH (written
// whole, then renamed into place, so the test never reads half of it), then sleeps until killed.
// With --ignore-term it ignores SIGTERM, as a stuck worker would (the agent must SIGKILL it).
//
//   worker_probe --out=/tmp/x/report [--ignore-term] --gpupool-worker-secret-fd=5
//
// The report: one "key=value" line each for secret, secret_fd, pid, pgid, ppid, uid, cwd, stdin
// (what descriptor 0 is), probe_var (the PROBE_VAR variable) and one "arg=..." line per argument.
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  std::string out;
  int secret_fd = -1;
  bool ignore_term = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--out=", 6) == 0) out = a + 6;
    if (std::strncmp(a, "--gpupool-worker-secret-fd=", 27) == 0) secret_fd = std::atoi(a + 27);
    if (std::strcmp(a, "--ignore-term") == 0) ignore_term = true;
  }
  if (ignore_term) signal(SIGTERM, SIG_IGN);
  if (out.empty()) {
    std::fprintf(stderr, "worker_probe: no --out=PATH\n");
    return 2;
  }
  std::string secret;
  if (secret_fd >= 0) {
    char buf[256];
    ssize_t n;
    while ((n = read(secret_fd, buf, sizeof buf)) > 0) secret.append(buf, static_cast<size_t>(n));
    close(secret_fd);
  }
  char cwd[PATH_MAX] = "";
  if (getcwd(cwd, sizeof cwd) == nullptr) std::strcpy(cwd, "?");
  char stdin_target[PATH_MAX] = "";
  ssize_t len = readlink("/proc/self/fd/0", stdin_target, sizeof stdin_target - 1);
  stdin_target[len > 0 ? len : 0] = '\0';
  const char* probe_var = std::getenv("PROBE_VAR");

  std::string tmp = out + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::perror("worker_probe: cannot write its report");
    return 3;
  }
  std::fprintf(f, "secret=%s\nsecret_fd=%d\npid=%d\npgid=%d\nppid=%d\nuid=%d\ncwd=%s\nstdin=%s\nprobe_var=%s\n",
               secret.c_str(), secret_fd, static_cast<int>(getpid()), static_cast<int>(getpgrp()),
               static_cast<int>(getppid()), static_cast<int>(getuid()), cwd, stdin_target,
               probe_var != nullptr ? probe_var : "");
  for (int i = 1; i < argc; ++i) std::fprintf(f, "arg=%s\n", argv[i]);
  std::fclose(f);
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::perror("worker_probe: cannot rename its report");
    return 3;
  }
  while (true) pause();
}
