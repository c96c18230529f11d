// File: runtime/agent/node_agent.h
//
// A node's agent (DESIGN §3): registers the node's GPUs with the head, heartbeats so the head
// knows the node is alive, reports each GPU's health as the driver reads it, and starts and
// stops jobs' workers on the head's word (runtime/agent/worker_launcher.h: its workers die
// with it, when this object goes or its process dies). The head
// schedules the node only while its agent is connected and heartbeating; when the agent's
// process dies, the connection closes and the head loses the node's leases at once.
//
// It runs inside `gpupool agent` (a daemon per node of a shared pool) and inside every rank of
// an mpirun job (each rank is the agent of its own node).
//
//   auto agent = NodeAgent::Start({.host = "127.0.0.1", .port = 7070, .token = agent_token,
//                                  .node = {"simulated", {node}}, .driver = driver.get()});
//
// Thread-safe; its own threads: the RPC loop (runtime/rpc/rpc_connection.h) and a heartbeat
// thread that also polls health.
#ifndef GPUPOOL_RUNTIME_AGENT_NODE_AGENT_H_
#define GPUPOOL_RUNTIME_AGENT_NODE_AGENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/devices/device_driver.h"
#include "pool/health.h"
#include "runtime/agent/diagnostics.h"
#include "runtime/agent/worker_launcher.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class RpcConnection;

struct NodeAgentOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;           // the head's agent token
  rpc::DiscoveredPool node;    // exactly one node, named as the head knows it
  // Reads health for the node's GPUs; null: no health reports (the GPUs stay as registered).
  // `driver_node` is the node's name as the driver knows it (it may differ from node.name).
  pool::DeviceDriver* driver = nullptr;
  std::string driver_node;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds health_interval{1000};
  std::function<void(const absl::Status&)> on_disconnected;  // RPC thread
  // Workers may run as root: when the agent is root and a team has no run_as user
  // (`gpupool agent --allow-root-workers`). Otherwise such a team's workers are refused.
  bool allow_root_workers = false;

  // Health (node_agent_health.cc). Active diagnostics: null `diagnostic`, none; otherwise on GPUs
  // the head reports idle and on quarantined ones (runtime/agent/diagnostics.h). Not owned.
  GpuDiagnostic* diagnostic = nullptr;
  DiagnosticPolicy diagnostics;
  // The operators' node health check (runtime/agent/health_check.h); empty: none.
  std::string health_check_program;
  std::chrono::milliseconds health_check_every{300'000};
  // Prints what the agent's health threads did (diagnostics run, checks failed); null: silent.
  std::function<void(const std::string&)> log;
};

class NodeAgent {
 public:
  // Connects and registers. The head's refusal (unknown node, GPUs that differ from its
  // configuration, wrong token) or kUnavailable when it cannot be reached.
  static absl::StatusOr<std::unique_ptr<NodeAgent>> Start(NodeAgentOptions options);
  ~NodeAgent();  // disconnects: the head takes the node down

  bool connected() const;
  const std::string& node() const { return options_.node.nodes[0].name; }
  uint64_t heartbeats_sent() const;
  // The workers this agent started and has not reaped yet.
  const WorkerLauncher& workers() const { return *launcher_; }

 private:
  explicit NodeAgent(NodeAgentOptions options);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);  // the heartbeat thread
  void PollHealth() ABSL_EXCLUSIVE_LOCKS_REQUIRED(heartbeat_);
  // The diagnostics thread and the health-check thread (node_agent_health.cc).
  void DiagnosticsLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void HealthCheckLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // The diagnostics thread's calls to the head: a lease for a test on GPU `index` (Unimplemented
  // from a head older than diagnostics' leases), its end with the test's outcome (applied only
  // when `concluded`), and an older head's report of one run without a lease.
  absl::StatusOr<std::string> BeginDiagnostic(int index);
  absl::Status EndDiagnostic(const std::string& lease_id, bool concluded, const absl::Status& result, double took_s);
  absl::Status ReportDiagnostic(int index, const absl::Status& result, double took_s);
  // Waits `d` or until the agent stops; true when it stops.
  bool StopWithin(std::chrono::milliseconds d) ABSL_LOCKS_EXCLUDED(mu_);
  void Log(const std::string& line) const;

  NodeAgentOptions options_;
  // Outlive the connection (whose AgentControl capability uses them): reset after it.
  std::unique_ptr<WorkerLauncher> launcher_;
  std::unique_ptr<RunningDiagnostic> running_diagnostic_ = std::make_unique<RunningDiagnostic>();
  std::unique_ptr<RpcConnection> connection_;
  struct Capabilities;
  // Each thread's own state says so: the connection's loop thread (what runs in its Call/Sync
  // closures asserts loop_) and the heartbeat thread (Loop asserts heartbeat_).
  ThreadConfined loop_;
  ThreadConfined heartbeat_;
  std::unique_ptr<Capabilities> caps_ ABSL_PT_GUARDED_BY(loop_);
  // Last verdict reported per GPU index (set by the constructor, before the thread starts).
  std::map<int, pool::HealthVerdict> health_ ABSL_GUARDED_BY(heartbeat_);

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  // The head's view of this node's GPUs, from its last heartbeat answer.
  std::vector<DiagnosticPlan::GpuView> head_view_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
  std::thread diagnostics_thread_;
  std::thread health_check_thread_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_NODE_AGENT_H_
