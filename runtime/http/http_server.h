// File: runtime/http/http_server.h
//
// A small HTTP/1.1 server for the head's metrics, JSON API and dashboard and the agents' device
// metrics (one layer below both, so there is one bounded server): one thread, a poll()
// loop over non-blocking POSIX sockets, one request per connection (answered with "Connection:
// close"). Written here rather than taken from KJ's HTTP so that it stays out of the RPC loop's
// thread and its bounds are explicit: the request head is at most `max_request_bytes`, a
// connection that has not sent a whole request within `request_timeout` is closed, at most
// `max_connections` are open at once (more are refused with 503), and a peer that stops reading
// its answer is dropped at the same deadline. Nothing a peer sends can crash it or hold its thread.
//
//   auto server = HttpServer::Start({.address = "127.0.0.1", .port = 0},
//                                   [](const HttpRequest& r) { return HttpResponse{.body = "hi"}; });
//   (*server)->port();
//
// Threads: `handler` runs on the server's thread, one request at a time; it must not block for
// long (it holds up every other connection meanwhile). An exception from it answers 500.
// Destruction stops the thread and closes every connection.
#ifndef GPUPOOL_RUNTIME_HTTP_HTTP_SERVER_H_
#define GPUPOOL_RUNTIME_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "runtime/http/http_request.h"

namespace gpupool::runtime {

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 0;            // 0: the system picks one
  bool allow_network = false;   // listen on a non-loopback address: the operator said so
  size_t max_request_bytes = 16 * 1024;
  size_t max_connections = 64;
  std::chrono::milliseconds request_timeout{5000};
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  // InvalidArgument for a non-loopback address without allow_network; Unavailable when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();

  uint16_t port() const { return port_; }
  uint64_t requests_answered() const { return answered_.load(); }

 private:
  struct Connection;
  HttpServer(HttpServerOptions options, HttpHandler handler) : options_(std::move(options)), handler_(std::move(handler)) {}
  void Run();
  // Reads what `c` sent and answers it once its request is whole (or bad). False: close it.
  bool OnReadable(Connection& c);
  bool OnWritable(Connection& c);
  void Answer(Connection& c, const HttpResponse& response, bool head_only);

  // Constant after Start.
  const HttpServerOptions options_;
  const HttpHandler handler_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: destruction writes it to stop the loop
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<uint64_t> answered_{0};
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HTTP_HTTP_SERVER_H_
