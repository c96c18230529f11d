// File: runtime/head/remote_pool.h
//
// A job's handle on a pool service in another process (runtime/head/pool_server.h), with the
// shape of EmbeddedPool: Request / Withdraw / Release, and a LeaseListener told of grants,
// revocations and losses. So the job runtime can lease from either.
//
//   auto pool = RemotePool::Connect({.port = port, .team = "vision", .token = "s3cret"});
//   (*pool)->Request(request, &listener);   // refused now, or granted later
//   (*pool)->Release(lease_id);
//
// Thread-safe: every method may be called from any thread, including from a listener callback.
// It runs the RPC on an event-loop thread of its own and calls listeners from one callback
// thread of its own, in the order the service sent them. When the connection is lost, every
// lease it knows of is reported lost, `on_disconnected` is called once, and later calls fail with
// kUnavailable. Do not destroy a RemotePool from one of its own listener callbacks.
#ifndef GPUPOOL_RUNTIME_HEAD_REMOTE_POOL_H_
#define GPUPOOL_RUNTIME_HEAD_REMOTE_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/head/embedded_pool.h"

namespace gpupool::runtime {

struct RemotePoolOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string team;
  std::string token;
  // Called once, from the callback thread, when the connection to the service is lost (not when
  // this object is destroyed).
  std::function<void(const absl::Status&)> on_disconnected;
};

class RemotePool {
 public:
  // Connects and authenticates. kUnavailable when the service cannot be reached; the service's
  // own refusal (kUnauthenticated for an unknown team or a wrong token) otherwise.
  static absl::StatusOr<std::unique_ptr<RemotePool>> Connect(const RemotePoolOptions& options);
  ~RemotePool();  // closes the connection; listeners are not called afterwards

  // As EmbeddedPool's, with the service's errors; kUnavailable once the connection is lost.
  absl::Status Request(const pool::LeaseRequest& request, LeaseListener* listener);
  absl::Status Withdraw(const std::string& request_id);
  absl::Status Release(const std::string& lease_id);
  bool connected() const;

  class Impl;

 private:
  explicit RemotePool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HEAD_REMOTE_POOL_H_
