// File: runtime/client/remote_pool.h
//
// A job's handle on a pool service in another process (runtime/service/pool_server.h): the
// PoolClient the job runtime leases through when the head is an mpirun job's rank 0 or the
// organisation's `gpupool head`.
//
//   auto pool = RemotePool::Connect({.port = port, .team = "vision", .token = "s3cret"});
//   (*pool)->Request(request, &listener);   // refused now, or granted later
//   (*pool)->Release(lease_id);
//
// Thread-safe: every method may be called from any thread, including from a listener callback.
// It runs the RPC on an event-loop thread of its own (runtime/rpc/rpc_connection.h) and calls
// listeners from one callback thread of its own, in the order the service sent them. When the
// connection is lost, every lease it knows of is reported lost (the head takes a lost job's leases
// back, and a restarted head closes the leases of its previous run). Then, with `reconnect_for`,
// it connects again (a restarted head, or one that came back) and sends its requests that were
// not granted yet again, so queued work is re-admitted; requests made meanwhile wait for the new
// connection. When it cannot reconnect in time (or without `reconnect_for`), `on_disconnected` is
// called once, requests not granted are failed through their listeners (OnRequestFailed), and
// later calls fail with kUnavailable. Do not destroy a RemotePool from one of its own listener
// callbacks.
#ifndef GPUPOOL_RUNTIME_CLIENT_REMOTE_POOL_H_
#define GPUPOOL_RUNTIME_CLIENT_REMOTE_POOL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/scheduler/scheduler.h"
#include "runtime/client/pool_client.h"
#include "runtime/rpc/node_codec.h"

namespace gpupool::runtime {

struct RemotePoolOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string team;
  std::string token;
  // Called once, from the callback thread, when the connection to the service is lost for good
  // (not when this object is destroyed).
  std::function<void(const absl::Status&)> on_disconnected;
  // How long to try to connect again after the connection is lost (0: do not). Each try
  // authenticates anew, with the same team and token.
  std::chrono::milliseconds reconnect_for{0};
};

class RemotePool final : public PoolClient {
 public:
  // Connects, authenticates and reads the head's configuration and clock. kUnavailable when the
  // service cannot be reached; the service's own refusal (kUnauthenticated for an unknown team
  // or a wrong token) otherwise.
  static absl::StatusOr<std::unique_ptr<RemotePool>> Connect(const RemotePoolOptions& options);
  ~RemotePool() override;  // closes the connection; listeners are not called afterwards

  // PoolClient, with the service's errors; kUnavailable once the connection is lost.
  absl::Status Request(pool::LeaseRequest request, LeaseListener* listener) override;
  // Sent in order with every other call, without waiting for the answer; a refusal comes
  // through the listener's OnRequestFailed on the callback thread.
  void Submit(pool::LeaseRequest request, LeaseListener* listener) override;
  absl::Status Withdraw(const std::string& request_id) override;
  absl::Status Release(const std::string& lease_id) override;
  // A lease given back while reconnecting (handed back once reclaimed) loses its busy time.
  absl::Status ReleaseUsed(const std::string& lease_id, double busy_gpu_s) override;
  void Checkpointed(const std::string& lease_id, const CheckpointNote& note) override;
  void ForgetCheckpoints(const std::string& task_key) override;
  double Now() const override;  // the head's pool clock, extrapolated from the connect time
  const pool::PoolConfig& config() const override;
  double capacity_gpus() const override;
  std::map<std::string, LedgerTeam> Ledger() const override;  // this job's own leases
  // Asks the head, on this job's session, for a worker on `launch.node`; waits for the agent's
  // answer (the worker has exec'd, or why it could not). The head's or agent's refusal as it
  // sent it (the node and the reason named); kUnavailable when the connection is lost.
  absl::StatusOr<int> StartWorker(const WorkerLaunch& launch) override;

  // One node's GPUs as the head knows them (a job process asks for the node it runs on).
  absl::StatusOr<rpc::DiscoveredPool> DescribeNode(const std::string& name);
  // This process's address on its connection to the head (empty when unknown): where workers on
  // other machines can reach it, since they reach the head.
  std::string LocalHost() const;
  bool connected() const;
  uint64_t reconnections() const;  // connections made again after a loss

  class Impl;

 private:
  explicit RemotePool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_REMOTE_POOL_H_
