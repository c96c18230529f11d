#include "runtime/agent/node_agent.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/agent/agent_control.h"
#include "runtime/agent/node_agent_capabilities.h"
#include "runtime/rpc/health_codec.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

NodeAgent::NodeAgent(NodeAgentOptions options)
    : options_(std::move(options)),
      launcher_(std::make_unique<WorkerLauncher>(WorkerLauncherOptions{
          .node = options_.node.nodes.empty() ? std::string() : options_.node.nodes[0].name,
          .allow_root_workers = options_.allow_root_workers})),
      caps_(std::make_unique<Capabilities>()) {
  for (const pool::DiscoveredGpu& gpu : options_.node.nodes[0].gpus) health_[gpu.index] = {gpu.health, {}};
}

absl::StatusOr<std::unique_ptr<NodeAgent>> NodeAgent::Start(NodeAgentOptions options) {
  if (options.node.nodes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("an agent serves exactly one node, not ", options.node.nodes.size()));
  }
  std::unique_ptr<NodeAgent> agent(new NodeAgent(std::move(options)));
  std::string bytes = rpc::EncodeNodes(agent->options_.node);
  Capabilities* caps = agent->caps_.get();  // the loop thread's: used by `setup`, which runs there
  WorkerLauncher* launcher = agent->launcher_.get();
  RunningDiagnostic* running = agent->running_diagnostic_.get();
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = agent->options_.host, .port = agent->options_.port,
                           .on_disconnected = agent->options_.on_disconnected},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.registerAgentRequest();
        req.setToken(agent->options_.token);
        req.setInventory(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
        req.setControl(kj::heap<AgentControl>(*launcher, *running));
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) caps->session = resp.getAgent();
        return st;
      });
  if (!c.ok()) return c.status();
  agent->connection_ = *std::move(c);
  agent->thread_ = std::thread([raw = agent.get()] { raw->Loop(); });
  if (agent->options_.diagnostic != nullptr) {
    agent->diagnostics_thread_ = std::thread([raw = agent.get()] { raw->DiagnosticsLoop(); });
  }
  if (!agent->options_.health_check_program.empty()) {
    agent->health_check_thread_ = std::thread([raw = agent.get()] { raw->HealthCheckLoop(); });
  }
  return agent;
}

NodeAgent::~NodeAgent() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  running_diagnostic_->InterruptAny("the agent is stopping");  // a test may take seconds
  if (diagnostics_thread_.joinable()) diagnostics_thread_.join();
  if (health_check_thread_.joinable()) health_check_thread_.join();
  if (connection_ != nullptr) {
    connection_->Sync([this] {
      loop_.AssertOnThread();
      caps_->session.reset();
    });
    connection_.reset();  // the head's AgentControl capability goes with it
  }
  launcher_.reset();  // stops every worker, and waits until they are reaped
}

bool NodeAgent::connected() const { return connection_ != nullptr && connection_->connected(); }

uint64_t NodeAgent::heartbeats_sent() const {
  MutexLock lock(&mu_);
  return heartbeats_;
}

void NodeAgent::Loop() {
  heartbeat_.AssertOnThread();
  auto next_health = std::chrono::steady_clock::now() + options_.health_interval;
  // The head's view of the GPUs, for diagnostics only, as often as they need it: a quarter of the
  // shortest wait they know (at least every heartbeat, at most every 10 s).
  const auto view_every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
      std::clamp(std::min(options_.diagnostics.quarantine_retry_s,
                          options_.diagnostics.every_s > 0 ? options_.diagnostics.every_s : 1e9) / 4, 0.0, 10.0)));
  auto next_view = std::chrono::steady_clock::now();
  MutexLock lock(&mu_);
  while (!cv_.WaitFor(&mu_, options_.heartbeat_interval, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; })) {
    lock.Unlock();
    std::vector<DiagnosticPlan::GpuView> view;
    const bool want_view = options_.diagnostic != nullptr && std::chrono::steady_clock::now() >= next_view;
    absl::Status st = connection_->Call([this, &view, want_view]() -> kj::Promise<absl::Status> {
      loop_.AssertOnThread();
      auto req = caps_->session->heartbeatRequest();
      req.setWantGpus(want_view);
      return req.send().then(
          [&view](capnp::Response<rpc::AgentSession::HeartbeatResults>&& resp) {
            for (rpc::GpuHealthState::Reader g : resp.getGpus()) {
              std::optional<pool::HealthState> state = rpc::HealthFromWire(static_cast<uint16_t>(g.getHealth()));
              if (state.has_value()) view.push_back({g.getIndex(), *state, g.getLeased()});
            }
            return absl::OkStatus();
          });
    });
    if (options_.driver != nullptr && std::chrono::steady_clock::now() >= next_health) {
      PollHealth();
      next_health = std::chrono::steady_clock::now() + options_.health_interval;
    }
    lock.Lock();
    if (st.ok()) ++heartbeats_;
    if (st.ok() && want_view) {
      head_view_ = std::move(view);
      next_view = std::chrono::steady_clock::now() + view_every;
    }
  }
}

}  // namespace gpupool::runtime
