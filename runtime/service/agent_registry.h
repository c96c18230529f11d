// File: runtime/service/agent_registry.h
//
// The node agents of a pool of remote nodes (PoolServiceOptions::remote_nodes): which agent
// speaks for each node, and whether it still heartbeats. A node is up in the pool while its
// agent's connection is open and heartbeats arrive; when the connection closes (AgentSession's
// destructor) or heartbeats stop for the heartbeat timeout, the node goes down, and the pool
// tells the holders of its leases. It also holds the leases of the diagnostics agents run
// (BeginDiagnostic, EndDiagnostic, DiagnosticLost; runtime/service/diagnostic_holds.h), journaled
// for chargeback. Internal to the service's RPC server.
//
//   AgentRegistry agents(pool, pump, durable, options.heartbeat_timeout);
//   auto agent = kj::heap<AgentSession>(agents);
//   absl::StatusOr<std::string> node = agents.Register(inventory, agent.get(), control);
//   if (node.ok()) agent->set_node(*node);           // the agent's connection holds it now
//   tasks.add(agents.WatchHeartbeats(timer));
//
// Threads: the server's loop thread only.
// Thread confinement, unchecked: no lock guards this state and clang's analysis (which checks
// locks) does not see it; only PoolServer::Impl's loop_ (ThreadConfined) marks the thread. A call
// from any other thread is a data race.
#ifndef GPUPOOL_RUNTIME_SERVICE_AGENT_REGISTRY_H_
#define GPUPOOL_RUNTIME_SERVICE_AGENT_REGISTRY_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include <capnp/blob.h>
#include <kj/async.h>
#include <kj/timer.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pool/devices/device_driver.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/service/head_durability.h"
#include "runtime/service/pool_service.h"

namespace gpupool::runtime {

class AgentRegistry;

// A node agent's connection (rpc::AgentSession). Its node is up while it lives (and heartbeats).
// Owned by the connection's RPC system; the registry must outlive it.
class AgentSession final : public rpc::AgentSession::Server {
 public:
  explicit AgentSession(AgentRegistry& registry) : registry_(registry) {}
  ~AgentSession();
  // Once registered: the node it speaks for.
  void set_node(std::string node) { node_ = std::move(node); }

  kj::Promise<void> heartbeat(HeartbeatContext context) override;
  // Health reports (agent_health_rpc.cc): readings, diagnostics and the node's health check.
  kj::Promise<void> reportHealth(ReportHealthContext context) override;
  kj::Promise<void> reportDiagnostic(ReportDiagnosticContext context) override;
  kj::Promise<void> reportNodeCheck(ReportNodeCheckContext context) override;
  // Diagnostics' leases (agent_health_rpc.cc; runtime/service/diagnostic_holds.h).
  kj::Promise<void> beginDiagnostic(BeginDiagnosticContext context) override;
  kj::Promise<void> endDiagnostic(EndDiagnosticContext context) override;

 private:
  AgentRegistry& registry_;
  std::string node_;  // empty until registered
};

class AgentRegistry {
 public:
  // `pool`, `pool_listener` (what hears of the pool's leases: the head's event pump, whose events
  // for diagnostics' leases come back through DiagnosticLost) and `durable` outlive the
  // registry; a node is taken down when its agent misses heartbeats for `heartbeat_timeout`.
  AgentRegistry(PoolService& pool, LeaseListener& pool_listener, HeadDurability& durable,
                std::chrono::milliseconds heartbeat_timeout)
      : pool_(pool), pool_listener_(pool_listener), durable_(durable), heartbeat_timeout_(heartbeat_timeout) {}

  // Checks an agent's node against the pool's and takes it up; returns the node's name. A node
  // has one agent: a second one is refused (Unavailable, the agent retries) until the first has
  // gone or fallen silent, and then replaces it. `control` is how the head asks the agent for
  // workers (none from an agent older than workers).
  absl::StatusOr<std::string> Register(capnp::Data::Reader inventory, AgentSession* agent,
                                       std::optional<rpc::AgentControl::Client> control = std::nullopt);
  // `agent`'s connection closed: its node goes down, unless a newer agent speaks for it.
  void Gone(const std::string& node, AgentSession* agent, const std::string& why);
  // `agent` is alive: a node taken down for its silence comes back up.
  void Heartbeat(const std::string& node, AgentSession* agent);
  // Takes down the nodes whose agents fell silent, checking four times per timeout, for as long
  // as the loop runs (add it to the loop's task set; it never resolves).
  kj::Promise<void> WatchHeartbeats(kj::Timer& timer);

  // The worker-starting capability of `node`'s live agent. kUnavailable naming the node when it
  // has no agent or its agent fell silent (it may come back: try again); kFailedPrecondition when
  // its agent is too old to start workers (it must be upgraded).
  absl::StatusOr<rpc::AgentControl::Client> ControlOf(const std::string& node);
  // Asks `node`'s agent, if it has one that starts workers, to stop `job`'s workers; no answer
  // awaited. Without an agent there is nothing to ask: an agent that goes away takes its
  // workers with it (they die with it, or with its connection: runtime/agent/node_agent.h).
  void StopJob(const std::string& node, const std::string& job);

  // Diagnostics' leases (diagnostic_holds.h), journaled for chargeback as team `_pool`'s. A lease
  // for `agent`'s test on GPU `gpu` of its node, or why not.
  absl::StatusOr<std::string> BeginDiagnostic(const std::string& node, int gpu, AgentSession* agent);
  // `agent`'s test ended: applies its outcome (PoolService::EndDiagnostic; nullopt: none).
  // Aborted when the lease was interrupted, or is not this agent's.
  absl::Status EndDiagnostic(AgentSession* agent, const std::string& lease_id, std::optional<bool> passed,
                             const std::string& detail);
  // The pool ended a lease nobody's session holds: when it is a diagnostic's (work was placed on
  // its GPU), tells its agent to stop the test and returns true.
  bool DiagnosticLost(const std::string& lease_id, const std::string& why);

  // Node agents registered now (silent ones included).
  size_t size() const { return agents_.size(); }
  // For the report: "up", "silent" (taken down for missing heartbeats) or "down" (no agent).
  absl::string_view StateOf(const std::string& node) const;
  // Forgets every agent without taking nodes down (the server is stopping).
  void Clear() { agents_.clear(); }
  PoolService& pool() { return pool_; }

 private:
  struct Agent {
    AgentSession* session = nullptr;
    std::chrono::steady_clock::time_point last_heartbeat;
    bool silent = false;  // its node was taken down for missing heartbeats
    std::optional<rpc::AgentControl::Client> control;  // none: too old to start workers
  };
  // Whether the node an agent registers is the one the head was configured with.
  absl::Status CheckNode(const pool::DiscoveredNode& node) const;
  // Ends the diagnostics' leases of `agent` (gone mid-test), applying no outcome; only those on
  // GPU `gpu` when given (a new test there replaces one whose end never arrived).
  void AbandonDiagnostics(AgentSession* agent, std::optional<int> gpu = std::nullopt);

  PoolService& pool_;
  LeaseListener& pool_listener_;
  HeadDurability& durable_;
  const std::chrono::milliseconds heartbeat_timeout_;
  std::map<std::string, Agent> agents_;  // the live agent of each node
  struct Diagnostic {
    int gpu = 0;  // on the node of `agent`
    AgentSession* agent = nullptr;
    std::optional<rpc::AgentControl::Client> control;  // the testing agent's: told to stop
  };
  std::map<std::string, Diagnostic> diagnostics_;  // running tests' leases, by lease id
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_AGENT_REGISTRY_H_
