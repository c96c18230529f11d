// File: runtime/head/rpc_connection.h
//
// A client's connection to the head (runtime/head/pool_server.h): one TCP connection with a
// two-party Cap'n Proto RPC system, driven by a KJ event loop on a thread of its own. Both kinds
// of client use it: a job's RemotePool and a node's NodeAgent.
//
//   auto c = RpcConnection::Connect({.host = "127.0.0.1", .port = port},
//       [&](rpc::PoolService::Client head, kj::WaitScope& ws) { ... authenticate ...; });
//   absl::Status st = c->Call([&]() -> kj::Promise<absl::Status> { ... a request ... });
//
// Thread-safe: Call may be made from any thread except the loop thread (it waits for the loop).
// When the connection drops, `on_disconnected` runs once on the loop thread (not when the object
// is destroyed), and Call fails with kUnavailable afterwards.
#ifndef GPUPOOL_RUNTIME_HEAD_RPC_CONNECTION_H_
#define GPUPOOL_RUNTIME_HEAD_RPC_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <kj/async.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

// The KJ exception kinds, as what the caller should do: DISCONNECTED -> kUnavailable, ...
absl::Status StatusFromKj(const kj::Exception& e, const std::string& context);

// Splits "HOST:PORT" ("[::1]:PORT" for IPv6). InvalidArgument naming the text when malformed.
absl::Status ParseHostPort(const std::string& text, std::string* host, uint16_t* port);

struct RpcConnectionOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::function<void(const absl::Status&)> on_disconnected;  // loop thread
};

class RpcConnection {
 public:
  // Runs on the loop thread once connected, with the head's bootstrap capability: authenticate
  // or register there and keep what it returns. Its error fails Connect.
  using Setup = std::function<absl::Status(rpc::PoolService::Client head, kj::WaitScope& wait)>;

  static absl::StatusOr<std::unique_ptr<RpcConnection>> Connect(RpcConnectionOptions options, Setup setup);
  ~RpcConnection();  // closes the connection

  // Runs `f` on the loop thread and waits for the promise it returns (an absl::Status).
  template <typename F>
  absl::Status Call(F&& f) {
    if (disconnected_.load()) return absl::UnavailableError(kConnectionLost);
    absl::Status out;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { out = executor_->executeSync(std::forward<F>(f)); })) {
      return StatusFromKj(*e, "pool service");
    }
    return out;
  }
  // Runs `f` on the loop thread and waits, whether or not the connection is still up (for
  // dropping capabilities, which must die on the loop thread, before destruction).
  void Sync(const std::function<void()>& f);
  bool connected() const { return !disconnected_.load(); }

  static constexpr char kConnectionLost[] = "the connection to the pool service was lost";

 private:
  explicit RpcConnection(RpcConnectionOptions options) : options_(std::move(options)) {}
  void Run(Setup& setup, std::promise<absl::Status>& started);

  const RpcConnectionOptions options_;
  std::thread thread_;
  kj::Own<const kj::Executor> executor_;      // set before Connect returns
  kj::Own<kj::PromiseFulfiller<void>> stop_;  // loop thread
  std::atomic<bool> stopping_{false};
  std::atomic<bool> disconnected_{false};
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HEAD_RPC_CONNECTION_H_
