// File: runtime/rpc/frame_socket.cc
#include "runtime/rpc/frame_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

absl::Status Errno(const std::string& what) { return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno))); }

// No Nagle delay (frames are whole messages), and a peer whose host vanished (power, network)
// is noticed: keepalive probes after 10 s idle, every 5 s, 3 unanswered end the connection, and
// data unacknowledged for 60 s does too (also a peer that stopped reading that long: a driver or
// worker stalled a minute is treated as gone). Without them a worker's host that disappears leaves its
// tasks waiting forever on a connection that never closes.
void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle_s = 10, interval_s = 5, probes = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  unsigned int user_timeout_ms = 60000;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

// Resolves HOST (a name or a literal, IPv4 or IPv6) for a stream socket.
absl::StatusOr<addrinfo*> Resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  return found;
}

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  if (deadline == std::chrono::steady_clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

}  // namespace

absl::StatusOr<std::unique_ptr<FrameSocket>> FrameSocket::Connect(const std::string& host, uint16_t port,
                                                                  std::chrono::milliseconds timeout) {
  absl::StatusOr<addrinfo*> found = Resolve(host, port, false);
  if (!found.ok()) return found.status();
  std::string where = absl::StrCat(host, ":", port);
  absl::Status last = absl::UnavailableError(absl::StrCat("nothing listens at ", where));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, RemainingMs(deadline));
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        errno = rc == 0 ? ETIMEDOUT : (err != 0 ? err : errno);
        rc = -1;
      }
    }
    if (rc != 0) {
      last = Errno(absl::StrCat("cannot connect to ", where));
      close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    Tune(fd);
    freeaddrinfo(*found);
    return std::make_unique<FrameSocket>(fd, where);
  }
  freeaddrinfo(*found);
  return last;
}

FrameSocket::FrameSocket(int fd, std::string peer, size_t max_frame)
    : fd_(fd), peer_(std::move(peer)), max_frame_(max_frame) {}

FrameSocket::~FrameSocket() { close(fd_); }

void FrameSocket::Shutdown() {
  shut_.store(true);
  shutdown(fd_, SHUT_RDWR);
}

absl::Status FrameSocket::Send(std::string_view frame) {
  if (const size_t limit = max_frame_.load(); frame.size() > limit) {
    return absl::InvalidArgumentError(absl::StrCat("a frame of ", frame.size(), " bytes is over the limit of ", limit));
  }
  uint32_t n = static_cast<uint32_t>(frame.size());
  unsigned char header[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                             static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  MutexLock lock(&send_mu_);
  iovec parts[2] = {{header, 4}, {const_cast<char*>(frame.data()), frame.size()}};
  size_t total = 4 + frame.size(), sent = 0;
  while (sent < total) {
    iovec rest[2];
    int count = 0;
    size_t skip = sent;
    for (const iovec& p : parts) {
      if (skip >= p.iov_len) {
        skip -= p.iov_len;
        continue;
      }
      rest[count++] = {static_cast<char*>(p.iov_base) + skip, p.iov_len - skip};
      skip = 0;
    }
    msghdr msg{};
    msg.msg_iov = rest;
    msg.msg_iovlen = count;
    ssize_t w = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno(absl::StrCat("sending to ", peer_));
    }
    sent += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status FrameSocket::Fill(size_t need, bool frame_started, std::chrono::steady_clock::time_point deadline) {
  while (filled_ - read_pos_ < need) {
    if (read_pos_ > 0 && (read_pos_ == filled_ || read_pos_ > (size_t{1} << 20))) {
      // What was returned already goes: the buffer holds at most one frame and what follows it.
      std::memmove(buffer_.data(), buffer_.data() + read_pos_, filled_ - read_pos_);
      filled_ -= read_pos_;
      read_pos_ = 0;
    }
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      pollfd p{fd_, POLLIN, 0};
      int rc = poll(&p, 1, RemainingMs(deadline));
      if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("no frame from ", peer_, " in time"));
    }
    const size_t want = std::max<size_t>(64 << 10, need - (filled_ - read_pos_));
    if (buffer_.size() < filled_ + want) buffer_.resize(filled_ + want);  // only the growth is zero-filled
    ssize_t r = recv(fd_, buffer_.data() + filled_, want, 0);
    if (r > 0) {
      filled_ += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    bool partial = frame_started || filled_ > read_pos_;
    if (r == 0 || shut_.load()) {
      return partial ? absl::DataLossError(absl::StrCat(peer_, " closed the connection in the middle of a frame"))
                     : absl::UnavailableError(absl::StrCat(peer_, " closed the connection"));
    }
    return Errno(absl::StrCat("receiving from ", peer_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FrameSocket::Receive(std::chrono::milliseconds timeout) {
  auto deadline = timeout.count() > 0 ? std::chrono::steady_clock::now() + timeout
                                      : std::chrono::steady_clock::time_point::max();
  if (absl::Status st = Fill(4, false, deadline); !st.ok()) return st;
  const auto* h = reinterpret_cast<const unsigned char*>(buffer_.data() + read_pos_);
  size_t n = size_t{h[0]} | size_t{h[1]} << 8 | size_t{h[2]} << 16 | size_t{h[3]} << 24;
  if (const size_t limit = max_frame_.load(); n > limit) {
    return absl::DataLossError(absl::StrCat(peer_, " sent a frame of ", n, " bytes, over the limit of ", limit));
  }
  if (absl::Status st = Fill(4 + n, true, deadline); !st.ok()) return st;
  std::string frame(buffer_.data() + read_pos_ + 4, n);
  read_pos_ += 4 + n;
  if (read_pos_ == filled_ && buffer_.size() > (size_t{4} << 20)) {
    // A big frame's room is not kept for the connection's life.
    std::string().swap(buffer_);
    read_pos_ = filled_ = 0;
  }
  return frame;
}

absl::StatusOr<std::unique_ptr<FrameListener>> FrameListener::Listen(const std::string& host, uint16_t port) {
  absl::StatusOr<addrinfo*> found = Resolve(host, port, true);
  if (!found.ok()) return found.status();
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port));
  for (addrinfo* a = *found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      last = Errno(absl::StrCat("cannot listen on ", host, ":", port));
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    uint16_t got = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                               : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    freeaddrinfo(*found);
    return std::unique_ptr<FrameListener>(new FrameListener(fd, host, got));
  }
  freeaddrinfo(*found);
  return last;
}

FrameListener::~FrameListener() { close(fd_); }

void FrameListener::Shutdown() {
  shut_.store(true);
  shutdown(fd_, SHUT_RDWR);  // wakes a blocked accept on Linux
}

absl::StatusOr<std::unique_ptr<FrameSocket>> FrameListener::Accept(size_t max_frame) {
  while (true) {
    sockaddr_storage from{};
    socklen_t len = sizeof(from);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (shut_.load()) {
      if (fd >= 0) close(fd);
      return absl::CancelledError("the listener was shut down");
    }
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return Errno("accept");
    }
    Tune(fd);
    char name[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (from.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&from);
      inet_ntop(AF_INET, &in->sin_addr, name, sizeof(name));
      port = ntohs(in->sin_port);
    } else if (from.ss_family == AF_INET6) {
      auto* in = reinterpret_cast<sockaddr_in6*>(&from);
      inet_ntop(AF_INET6, &in->sin6_addr, name, sizeof(name));
      port = ntohs(in->sin6_port);
    }
    return std::make_unique<FrameSocket>(fd, absl::StrCat(name, ":", port), max_frame);
  }
}

}  // namespace gpupool::runtime
