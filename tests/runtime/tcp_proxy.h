// File: tests/runtime/tcp_proxy.h
//
// A TCP proxy on 127.0.0.1 for RPC tests: it forwards each accepted connection to `target_port`,
// records what clients sent, and can cut every connection at once (a network blip: both ends see
// the connection drop while they stay up). New connections are forwarded again afterwards.
#ifndef GPUPOOL_TESTS_RUNTIME_TCP_PROXY_H_
#define GPUPOOL_TESTS_RUNTIME_TCP_PROXY_H_

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpupool::runtime {

inline int ConnectLoopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline void SendAll(int fd, const char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the other end closed: it may
    done += static_cast<size_t>(n);
  }
}

class TcpProxy {
 public:
  explicit TcpProxy(uint16_t target_port) : target_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    (void)::listen(listener_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TcpProxy() {
    stop_.store(true);
    thread_.join();
    for (Pair& p : pairs_) CloseBoth(p);
    ::close(listener_);
  }

  uint16_t port() const { return port_; }
  // Every byte clients sent so far, in order (for one connection: its session).
  std::string recorded() {
    std::lock_guard<std::mutex> lock(mu_);
    return recorded_;
  }
  // Cuts every open connection (both sides see it end); the proxy keeps accepting.
  void CutAll() { cut_.store(true); }
  // While refusing, each new connection is closed as soon as it is accepted (a peer that cannot
  // get through yet); open ones are not touched.
  void Refuse(bool refuse) { refuse_.store(refuse); }

 private:
  struct Pair {
    int client = -1, target = -1;
  };
  static void CloseBoth(Pair& p) {
    if (p.client >= 0) ::close(p.client);
    if (p.target >= 0) ::close(p.target);
    p.client = p.target = -1;
  }
  void Run() {
    char buf[65536];
    while (!stop_.load()) {
      if (cut_.exchange(false)) {
        for (Pair& p : pairs_) {
          ::shutdown(p.client, SHUT_RDWR);
          ::shutdown(p.target, SHUT_RDWR);
          CloseBoth(p);
        }
        pairs_.clear();
      }
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (const Pair& p : pairs_) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.target, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
      if (fds[0].revents != 0) {
        int client = ::accept(listener_, nullptr, nullptr);
        int target = client >= 0 && !refuse_.load() ? ConnectLoopback(target_) : -1;
        if (client >= 0 && target >= 0) {
          pairs_.push_back({client, target});
        } else {
          if (client >= 0) ::close(client);
        }
        continue;  // the poll set changed
      }
      for (size_t i = 0; i < pairs_.size(); ++i) {
        Pair& p = pairs_[i];
        bool closed = false;
        if (fds[1 + 2 * i].revents != 0) {
          ssize_t n = ::recv(p.client, buf, sizeof buf, 0);
          if (n <= 0) {
            closed = true;
          } else {
            {
              std::lock_guard<std::mutex> lock(mu_);
              recorded_.append(buf, static_cast<size_t>(n));
            }
            SendAll(p.target, buf, static_cast<size_t>(n));
          }
        }
        if (!closed && fds[2 + 2 * i].revents != 0) {
          ssize_t n = ::recv(p.target, buf, sizeof buf, 0);
          if (n <= 0) {
            closed = true;
          } else {
            SendAll(p.client, buf, static_cast<size_t>(n));
          }
        }
        if (closed) CloseBoth(p);
      }
      std::erase_if(pairs_, [](const Pair& p) { return p.client < 0; });
    }
  }

  const uint16_t target_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<bool> refuse_{false};
  std::thread thread_;
  std::vector<Pair> pairs_;  // the proxy's thread only
  std::mutex mu_;
  std::string recorded_;  // guarded by mu_
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_TESTS_RUNTIME_TCP_PROXY_H_
