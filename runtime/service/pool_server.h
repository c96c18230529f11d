// File: runtime/service/pool_server.h
//
// Serves an PoolService over Cap'n Proto RPC (runtime/rpc/pool_service.capnp), so that jobs in
// other processes lease GPUs from it (DESIGN §3 "shared pool"). A job authenticates as a team
// with the token from the head's configuration and gets a Session; a session sees only its own
// requests and leases. When a session ends (the job dropped it or disconnected) its pending
// requests are withdrawn and its leases released.
//
// When the pool is one of remote nodes (PoolServiceOptions::remote_nodes), node agents register
// their node with the agent token and heartbeat. A node is schedulable while its agent's
// connection is open and heartbeats arrive; when the connection closes (a killed process closes
// its sockets at once) or heartbeats stop for `heartbeat_timeout` (a hung or cut-off machine),
// the node's GPUs are lost, and so are the leases on them: their jobs are told at once.
//
//   PoolServerOptions o;
//   o.team_tokens = {{"vision", "s3cret"}};
//   auto server = PoolServer::Start(std::move(pool), o);   // StatusOr
//   (*server)->port();                                     // bound on 127.0.0.1
//
// Threads: the server runs its KJ event loop on a thread of its own; the pool's listener calls
// are queued to that thread. The loop also runs the scheduling cycles that requests and
// releases call for, once per burst of messages (PoolService::OwnerSchedules), so a lease round
// trip wakes no other thread; a request that fits while nothing else waits is answered with its
// lease. Every public method is thread-safe. Destruction closes every connection (clients see a
// disconnect), then stops the pool.
#ifndef GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_H_
#define GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/service/pool_service.h"

namespace gpupool::runtime {

struct PoolServerOptions {
  std::string address = "127.0.0.1";  // loopback unless allow_network
  // Listen on an address other machines can reach. Off by default: tokens and leases travel
  // unencrypted (no TLS yet), so the network between the nodes must be trusted.
  bool allow_network = false;
  uint16_t port = 0;                  // 0: the system picks one; see PoolServer::port()
  std::map<std::string, std::string> team_tokens;  // team -> token; a team not here is refused
  std::string agent_token;   // what node agents present; empty: agents are refused
  // What operators present to see the whole pool (a team's token sees its own rows and the
  // pool's totals); empty: none.
  std::string operator_token;
  std::chrono::milliseconds heartbeat_timeout{3000};  // a silent agent's node is lost after this
  // The head's durable journal (runtime/service/journal/head_journal.h); empty: none (nothing survives a
  // restart). With one, a job's request and release are acknowledged only once they are
  // durable, grants and losses are recorded, and every closed lease lands in the ledger that
  // `gpupool usage` reads. On start, requests left by a previous run are dropped (their jobs send
  // them again); its leases are kept for their jobs to reclaim (reclaim_window).
  std::string journal_path;
  // With a journal, the leases a previous run left open are taken back at start and kept for
  // their jobs, which reclaim them when they reconnect (their tasks keep running through the
  // restart); those not reclaimed within this window are released.
  std::chrono::milliseconds reclaim_window{30000};
  // The HTTP endpoint (head_http.h: /metrics, /api/v1/..., the dashboard), on a thread of its
  // own; loopback unless allow_network. Off unless `http`.
  // With a journal: the pool's history (history_sampler.h) is sampled this often, and kept this
  // long. 0: no sampling.
  std::chrono::milliseconds history_interval{60000};
  std::chrono::hours history_retention{24 * 30};
  bool http = false;
  std::string http_address = "127.0.0.1";
  uint16_t http_port = 0;  // 0: the system picks one; see PoolServer::http_port()
};

class PoolServer {
 public:
  // Takes the pool: the server must outlive its listener calls, so it stops the pool itself.
  // Fails when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<PoolServer>> Start(std::unique_ptr<PoolService> pool,
                                                           const PoolServerOptions& options);
  ~PoolServer();

  uint16_t port() const;
  // The HTTP endpoint's port; 0 without one.
  uint16_t http_port() const;
  PoolService& pool();
  // Connections accepted so far (tests, operators).
  uint64_t connections_accepted() const;
  // The operators' view (`gpupool status` / `queue`) as JSON: nodes with their agents and GPUs,
  // leases held, requests pending with the reason each waits.
  std::string Report();
  // Node agents connected now.
  size_t agents_connected();

  class Impl;

 private:
  explicit PoolServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_POOL_SERVER_H_
