#include "tests/transport/test_peer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#ifndef GPUPOOL_UCX_TEST_PEER
#error "GPUPOOL_UCX_TEST_PEER must name the ucx_test_peer binary"
#endif

namespace gpupool::transport::testing {

std::string PatternId(size_t size) { return absl::StrCat("pattern-", size); }

void FillPattern(absl::Span<std::byte> out) {
  uint64_t state = out.size() * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  while (i < out.size()) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    size_t n = std::min(sizeof(z), out.size() - i);
    std::memcpy(out.data() + i, &z, n);
    i += n;
  }
}

std::vector<std::byte> Pattern(size_t size) {
  std::vector<std::byte> bytes(size);
  FillPattern(absl::MakeSpan(bytes));
  return bytes;
}

uint64_t Checksum(absl::Span<const std::byte> bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

std::string HexEncode(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

absl::StatusOr<std::string> HexDecode(absl::string_view hex) {
  if (hex.size() % 2 != 0) return absl::InvalidArgumentError("odd-length hex");
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return absl::InvalidArgumentError("bad hex digit");
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PeerProcess>> PeerProcess::Start(std::vector<std::string> args,
                                                                absl::Duration timeout) {
  // Writing to a child that died must fail, not kill the test with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<char*> argv;
  std::string binary = GPUPOOL_UCX_TEST_PEER;
  argv.push_back(binary.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  auto peer = std::make_unique<PeerProcess>();
  peer->pid_ = pid;
  peer->stdin_fd_ = in[1];
  peer->stdout_fd_ = out[0];
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> line = peer->ReadLine(deadline - absl::Now());
    if (!line.ok()) return line.status();
    std::vector<std::string> words = absl::StrSplit(*line, ' ');
    if (words[0] == "ready") break;
    if (words[0] == "address" && words.size() == 2) {
      absl::StatusOr<std::string> address = HexDecode(words[1]);
      if (!address.ok()) return address.status();
      peer->address_ = *std::move(address);
    } else if (words[0] == "object" && words.size() == 3) {
      uint64_t sum = 0;
      if (!absl::SimpleAtoi(words[2], &sum)) return absl::InternalError(*line);
      peer->checksums_[words[1]] = sum;
    }
  }
  return peer;
}

PeerProcess::~PeerProcess() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (!reaped_ && pid_ > 0) {
    // Closing stdin asks it to exit; a child that does not within 5 s is killed.
    for (int i = 0; i < 500 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) usleep(10000);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> PeerProcess::ReadLine(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(absl::StrCat("ucx_test_peer ", pid_, ": no line in time"));
    }
    pollfd fd{stdout_fd_, POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) continue;
    char chunk[4096];
    ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) return absl::UnavailableError(absl::StrCat("ucx_test_peer ", pid_, " exited"));
    buffered_.append(chunk, static_cast<size_t>(n));
  }
}

bool PeerProcess::WriteLine(absl::string_view line) {
  std::string text = absl::StrCat(line, "\n");
  return write(stdin_fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

void PeerProcess::Kill() { kill(pid_, SIGKILL); }

int PeerProcess::Wait() {
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  return status;
}

}  // namespace gpupool::transport::testing
