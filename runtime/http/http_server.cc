#include "runtime/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

struct HttpServer::Connection {
  int fd = -1;
  std::string in;
  std::string out;
  size_t sent = 0;
  bool writing = false;
  std::chrono::steady_clock::time_point deadline;
};

namespace {

bool IsLoopback(const std::string& address) {
  return address == "127.0.0.1" || address == "localhost" || address == "::1";
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options, HttpHandler handler) {
  if (!IsLoopback(options.address) && !options.allow_network) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the HTTP endpoint listens on loopback unless told it may use the network; got '", options.address,
        "' (--insecure-network allows it: what it serves travels unencrypted)"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string port_text = std::to_string(options.port);
  if (int rc = getaddrinfo(options.address.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve HTTP address '", options.address, "': ", gai_strerror(rc)));
  }
  std::unique_ptr<HttpServer> server(new HttpServer(options, std::move(handler)));
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr && server->listen_fd_ < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      server->listen_fd_ = fd;
    } else {
      last_error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(found);
  if (server->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.address, ":", options.port, ": ",
                                               last_error));
  }
  SetNonBlocking(server->listen_fd_);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wake_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  server->thread_ = std::thread([raw = server.get()] { raw->Run(); });
  return server;
}

HttpServer::~HttpServer() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void HttpServer::Answer(Connection& c, const HttpResponse& response, bool head_only) {
  c.out = SerializeHttpResponse(response, head_only);
  c.sent = 0;
  c.writing = true;
  c.in.clear();
  c.in.shrink_to_fit();
  answered_.fetch_add(1);
}

bool HttpServer::OnReadable(Connection& c) {
  char buffer[4096];
  bool peer_done = false;  // it shut down its side: what we have is all there is
  while (true) {
    ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) {
      peer_done = true;
      break;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return false;
    }
    // Never hold more than the limit (plus one read): the parser refuses the rest.
    c.in.append(buffer, static_cast<size_t>(n));
    if (c.in.size() > options_.max_request_bytes) break;
  }
  HttpParse parse = ParseHttpRequest(c.in, options_.max_request_bytes);
  if (parse.state == HttpParse::kIncomplete) return !peer_done;
  if (parse.state == HttpParse::kBad) {
    Answer(c, HttpResponse{.status = parse.status, .body = parse.error + "\n"}, false);
    return true;
  }
  HttpResponse response;
  try {
    response = handler_(parse.request);
  } catch (const std::exception& e) {
    response = HttpResponse{.status = 500, .body = "internal error\n"};
  }
  Answer(c, response, parse.request.method == "HEAD");
  return true;
}

bool HttpServer::OnWritable(Connection& c) {
  while (c.sent < c.out.size()) {
    ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    c.sent += static_cast<size_t>(n);
  }
  return false;  // all sent: close (Connection: close)
}

void HttpServer::Run() {
  std::list<Connection> connections;
  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  while (true) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
      polled.push_back(&c);
    }
    int ready = poll(fds.data(), fds.size(), 200);
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;  // stopping
    const auto now = std::chrono::steady_clock::now();
    std::vector<Connection*> done;
    for (size_t i = 0; i < polled.size(); ++i) {
      Connection& c = *polled[i];
      short ev = fds[i + 2].revents;
      bool keep = true;
      if (ev & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (c.writing && (ev & (POLLOUT | POLLHUP))) {
        keep = OnWritable(c);
      } else if (!c.writing && (ev & (POLLIN | POLLHUP))) {
        keep = OnReadable(c);
        if (keep && c.writing) keep = OnWritable(c);  // most answers fit the socket's buffer at once
      }
      if (keep && now >= c.deadline) keep = false;  // too slow to send its request or to read the answer
      if (!keep) done.push_back(&c);
    }
    for (Connection* c : done) {
      close(c->fd);
      connections.remove_if([c](const Connection& x) { return &x == c; });
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (connections.size() >= options_.max_connections) {
          std::string busy = SerializeHttpResponse(HttpResponse{.status = 503, .body = "too many connections\n"}, false);
          (void)!send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          close(fd);
          continue;
        }
        connections.push_back(Connection{.fd = fd, .deadline = now + options_.request_timeout});
      }
    }
  }
  for (Connection& c : connections) close(c.fd);
}

}  // namespace gpupool::runtime
