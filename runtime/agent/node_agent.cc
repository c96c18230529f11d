#include "runtime/agent/node_agent.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/agent/agent_control.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

struct NodeAgent::Capabilities {
  std::optional<rpc::AgentSession::Client> session;
};

NodeAgent::NodeAgent(NodeAgentOptions options)
    : options_(std::move(options)),
      launcher_(std::make_unique<WorkerLauncher>(WorkerLauncherOptions{
          .node = options_.node.nodes.empty() ? std::string() : options_.node.nodes[0].name,
          .allow_root_workers = options_.allow_root_workers})),
      caps_(std::make_unique<Capabilities>()) {
  for (const pool::DiscoveredGpu& gpu : options_.node.nodes[0].gpus) health_[gpu.index] = gpu.health;
}

absl::StatusOr<std::unique_ptr<NodeAgent>> NodeAgent::Start(NodeAgentOptions options) {
  if (options.node.nodes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("an agent serves exactly one node, not ", options.node.nodes.size()));
  }
  std::unique_ptr<NodeAgent> agent(new NodeAgent(std::move(options)));
  std::string bytes = rpc::EncodeNodes(agent->options_.node);
  Capabilities* caps = agent->caps_.get();  // the loop thread's: used by `setup`, which runs there
  WorkerLauncher* launcher = agent->launcher_.get();
  absl::StatusOr<std::unique_ptr<RpcConnection>> c = RpcConnection::Connect(
      RpcConnectionOptions{.host = agent->options_.host, .port = agent->options_.port,
                           .on_disconnected = agent->options_.on_disconnected},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.registerAgentRequest();
        req.setToken(agent->options_.token);
        req.setInventory(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
        req.setControl(kj::heap<AgentControl>(*launcher));
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) caps->session = resp.getAgent();
        return st;
      });
  if (!c.ok()) return c.status();
  agent->connection_ = *std::move(c);
  agent->thread_ = std::thread([raw = agent.get()] { raw->Loop(); });
  return agent;
}

NodeAgent::~NodeAgent() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
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
  MutexLock lock(&mu_);
  while (!cv_.WaitFor(&mu_, options_.heartbeat_interval, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; })) {
    lock.Unlock();
    absl::Status st = connection_->Call([this]() -> kj::Promise<absl::Status> {
      loop_.AssertOnThread();
      return caps_->session->heartbeatRequest().send().then(
          [](capnp::Response<rpc::AgentSession::HeartbeatResults>&&) { return absl::OkStatus(); });
    });
    if (options_.driver != nullptr && std::chrono::steady_clock::now() >= next_health) {
      PollHealth();
      next_health = std::chrono::steady_clock::now() + options_.health_interval;
    }
    lock.Lock();
    if (st.ok()) ++heartbeats_;
  }
}

void NodeAgent::PollHealth() {
  for (auto& [index, previous] : health_) {
    absl::StatusOr<pool::GpuHealthReading> reading = options_.driver->ReadHealth(pool::GpuRef{options_.driver_node, index});
    pool::HealthVerdict verdict = reading.ok() ? pool::AssessHealth(*reading, previous)
                                               : pool::HealthVerdict{pool::HealthState::kLost, {}};
    if (verdict.state == previous) continue;
    absl::Status st = connection_->Call([this, index = index, state = verdict.state]() -> kj::Promise<absl::Status> {
      loop_.AssertOnThread();
      auto req = caps_->session->reportHealthRequest();
      req.setGpuIndex(index);
      req.setHealth(static_cast<rpc::Health>(static_cast<uint16_t>(state)));
      return req.send().then([](capnp::Response<rpc::AgentSession::ReportHealthResults>&& resp) {
        return rpc::DecodeStatus(resp.getStatus());
      });
    });
    if (st.ok()) previous = verdict.state;  // else told again at the next poll
  }
}

}  // namespace gpupool::runtime
