// File: runtime/rpc/rpc_connection.h
//
// A client's connection to the head (runtime/service/pool_server.h): one TCP connection with a
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
#ifndef GPUPOOL_RUNTIME_RPC_RPC_CONNECTION_H_
#define GPUPOOL_RUNTIME_RPC_RPC_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <chrono>
#include <future>
#include <type_traits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <kj/async.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/sync/mutex.h"

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

  // Runs `f` on the loop thread and waits for the promise it returns (an absl::Status). Calls and
  // Posts run in the order they were made, from whichever threads.
  template <typename F>
  absl::Status Call(F&& f) {
    if (disconnected_.load()) return absl::UnavailableError(kConnectionLost);
    return Start(std::forward<F>(f)).get();
  }
  // Call, waiting at most `timeout` (then DeadlineExceeded; the call may still run later): for
  // a goodbye that must not hang a process whose service stopped answering.
  template <typename F>
  absl::Status CallFor(F&& f, std::chrono::milliseconds timeout) {
    if (disconnected_.load()) return absl::UnavailableError(kConnectionLost);
    std::future<absl::Status> result = Start(std::forward<F>(f));
    if (result.wait_for(timeout) != std::future_status::ready) {
      return absl::DeadlineExceededError("the pool service did not answer in time");
    }
    return result.get();
  }
  // Runs `f` on the loop thread and waits, whether or not the connection is still up (for
  // dropping capabilities, which must die on the loop thread, before destruction).
  void Sync(const std::function<void()>& f);
  // Runs `f` on the loop thread soon, without waiting: for calls whose answer nobody waits for
  // (a lease given back). Costs the caller one eventfd write (a cross-thread executeSync costs a
  // round trip through the loop); dropped if the connection stops first. Any thread, the
  // loop's included.
  void Post(std::function<void()> f) ABSL_LOCKS_EXCLUDED(posted_mu_);
  bool connected() const { return !disconnected_.load(); }
  // This end's address on the connection ("192.0.2.2", "::1"; empty when not a TCP socket): the
  // address by which machines that reach the head reach this one. Set before Connect returns.
  const std::string& local_host() const { return local_host_; }

  static constexpr char kConnectionLost[] = "the connection to the pool service was lost";

 private:
  // A Call's answer. Set once on the loop thread; if the call is dropped unanswered (the
  // connection stopped first), the last owner's destructor answers kUnavailable, so no caller
  // waits forever.
  struct Reply {
    std::promise<absl::Status> promise;
    bool set = false;
    void Set(absl::Status s) {
      if (set) return;
      set = true;
      promise.set_value(std::move(s));
    }
    ~Reply() {
      if (!set) promise.set_value(absl::UnavailableError(kConnectionLost));
    }
  };

  explicit RpcConnection(RpcConnectionOptions options) : options_(std::move(options)) {}
  // Posts `f` (a copy: it may run after a timed-out caller has gone) and returns its answer.
  template <typename F>
  std::future<absl::Status> Start(F&& f) {
    auto reply = std::make_shared<Reply>();
    std::future<absl::Status> result = reply->promise.get_future();
    Post([f = std::decay_t<F>(std::forward<F>(f)), reply]() mutable {
      kj::Maybe<kj::Promise<absl::Status>> sent;
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { sent = f(); })) {
        reply->Set(StatusFromKj(*e, "pool service"));
        return;
      }
      KJ_IF_MAYBE(p, sent) {
        p->then([reply](absl::Status s) { reply->Set(std::move(s)); },
                [reply](kj::Exception&& e) { reply->Set(StatusFromKj(e, "pool service")); })
            .detach([](kj::Exception&&) {});
      }
    });
    return result;
  }
  void Run(Setup& setup, std::promise<absl::Status>& started);  // the loop thread

  const RpcConnectionOptions options_;
  std::thread thread_;
  kj::Own<const kj::Executor> executor_;      // set before Connect returns
  ThreadConfined loop_;  // the loop thread (Run and what it runs)
  kj::Own<kj::PromiseFulfiller<void>> stop_ ABSL_GUARDED_BY(loop_);
  std::atomic<bool> stopping_{false};
  std::atomic<bool> disconnected_{false};
  // Post's queue: the loop drains it when the eventfd says there is something.
  int posted_fd_ = -1;  // an eventfd, made before the loop starts
  std::string local_host_;  // written by the loop thread before Connect returns, then constant
  Mutex posted_mu_;
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(posted_mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_RPC_RPC_CONNECTION_H_
