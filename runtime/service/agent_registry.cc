#include "runtime/service/agent_registry.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/health_codec.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/node_codec.h"

namespace gpupool::runtime {

AgentSession::~AgentSession() {
  if (!node_.empty()) registry_.Gone(node_, this, "its agent disconnected");
}

kj::Promise<void> AgentSession::heartbeat(HeartbeatContext context) {
  registry_.Heartbeat(node_, this);
  if (!context.getParams().getWantGpus()) return kj::READY_NOW;
  // How the head sees the node's GPUs: the agent diagnoses the idle and the quarantined ones.
  std::vector<NodeGpuState> gpus = registry_.pool().NodeGpuStates(node_);
  auto out = context.getResults().initGpus(gpus.size());
  for (unsigned i = 0; i < gpus.size(); ++i) {
    out[i].setIndex(gpus[i].index);
    out[i].setHealth(rpc::HealthToWire(gpus[i].state));
    out[i].setLeased(gpus[i].leased);
  }
  return kj::READY_NOW;
}

absl::Status AgentRegistry::CheckNode(const pool::DiscoveredNode& node) const {
  const pool::InventoryNode* known = nullptr;
  for (const pool::InventoryNode& n : pool_.inventory().nodes()) {
    if (n.name == node.name) known = &n;
  }
  if (known == nullptr) {
    return absl::NotFoundError(absl::StrCat("node '", node.name, "' is not in this pool's configuration"));
  }
  // The node must be what the head was configured with, or leases would promise GPUs that are
  // not there (as Slurm drains a node whose registration disagrees with slurm.conf).
  if (known->gpu_positions.size() != node.gpus.size()) {
    return absl::FailedPreconditionError(absl::StrCat("node '", node.name, "' reports ", node.gpus.size(),
                                                      " GPUs; the pool has ", known->gpu_positions.size()));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const pool::DiscoveredGpu& have = pool_.inventory().gpus()[known->gpu_positions[i]].device;
    if (have.index != node.gpus[i].index || have.model != node.gpus[i].model) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node '", node.name, "' reports GPU ", node.gpus[i].index, " as '", node.gpus[i].model,
          "'; the pool has GPU ", have.index, " as '", have.model, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AgentRegistry::Register(capnp::Data::Reader inventory, AgentSession* agent,
                                                    std::optional<rpc::AgentControl::Client> control) {
  absl::StatusOr<rpc::DiscoveredPool> sent = rpc::DecodeNodes(
      absl::string_view(reinterpret_cast<const char*>(inventory.begin()), inventory.size()));
  if (!sent.ok()) return sent.status();
  if (sent->nodes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("an agent registers exactly one node, not ", sent->nodes.size()));
  }
  const pool::DiscoveredNode& node = sent->nodes[0];
  if (absl::Status matches = CheckNode(node); !matches.ok()) return matches;
  // One agent per node. A second one waits (Unavailable: `gpupool agent` retries) until the first
  // has gone or fallen silent; taking over from a live agent would leave the node down for good
  // once the newcomer left, with the first one still heartbeating unheard.
  if (auto current = agents_.find(node.name); current != agents_.end() && !current->second.silent) {
    return absl::UnavailableError(absl::StrCat("node '", node.name,
                                               "' already has a live agent; a second one is taken once the "
                                               "first has gone or missed its heartbeats"));
  }
  agents_[node.name] = Agent{agent, std::chrono::steady_clock::now(), false, std::move(control)};
  absl::Status up = pool_.NodeUp(node.name);
  if (!up.ok()) return up;
  return node.name;
}

void AgentRegistry::Gone(const std::string& node, AgentSession* agent, const std::string& why) {
  AbandonDiagnostics(agent);
  auto it = agents_.find(node);
  if (it == agents_.end() || it->second.session != agent) return;  // replaced by a newer agent
  agents_.erase(it);
  (void)pool_.NodeDown(node, why);
}

void AgentRegistry::Heartbeat(const std::string& node, AgentSession* agent) {
  auto it = agents_.find(node);
  if (it == agents_.end() || it->second.session != agent) return;
  it->second.last_heartbeat = std::chrono::steady_clock::now();
  if (it->second.silent) {
    it->second.silent = false;
    (void)pool_.NodeUp(node);
  }
}

kj::Promise<void> AgentRegistry::WatchHeartbeats(kj::Timer& timer) {
  auto period = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10), heartbeat_timeout_ / 4);
  return timer.afterDelay(period.count() * kj::MILLISECONDS).then([this, &timer] {
    auto now = std::chrono::steady_clock::now();
    for (auto& [node, agent] : agents_) {
      if (agent.silent || now - agent.last_heartbeat < heartbeat_timeout_) continue;
      agent.silent = true;
      (void)pool_.NodeDown(node, absl::StrCat("no heartbeat from its agent for ", heartbeat_timeout_.count(), " ms"));
    }
    return WatchHeartbeats(timer);
  });
}

absl::StatusOr<rpc::AgentControl::Client> AgentRegistry::ControlOf(const std::string& node) {
  auto it = agents_.find(node);
  if (it == agents_.end()) {
    return absl::UnavailableError(absl::StrCat("node '", node, "' has no agent connected to start a worker"));
  }
  if (it->second.silent) {
    return absl::UnavailableError(absl::StrCat("the agent of node '", node, "' has missed its heartbeats"));
  }
  if (!it->second.control.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("the agent of node '", node, "' is too old to start workers"));
  }
  return rpc::AgentControl::Client(*it->second.control);
}

void AgentRegistry::StopJob(const std::string& node, const std::string& job) {
  auto it = agents_.find(node);
  if (it == agents_.end() || !it->second.control.has_value()) return;
  auto req = it->second.control->stopJobRequest();
  req.setJob(job);
  req.send().detach([](kj::Exception&&) {});  // an agent gone meanwhile took its workers with it
}

absl::StatusOr<std::string> AgentRegistry::BeginDiagnostic(const std::string& node, int gpu, AgentSession* agent) {
  // Only the node's live agent tests it: one replaced, or silent, would never hear a stop.
  auto current = agents_.find(node);
  if (current == agents_.end() || current->second.session != agent || current->second.silent) {
    return absl::FailedPreconditionError(absl::StrCat("this agent does not speak for node '", node, "' now"));
  }
  // A test of this agent's on the GPU whose end never arrived (the call failed) is over.
  AbandonDiagnostics(agent, gpu);
  absl::StatusOr<pool::Lease> lease = pool_.BeginDiagnostic(pool::GpuRef{node, gpu}, &pool_listener_);
  if (!lease.ok()) return lease.status();
  durable_.JournalLease(*lease, kPoolTeam);
  Diagnostic d{gpu, agent, std::nullopt};
  if (current->second.control.has_value()) d.control = rpc::AgentControl::Client(*current->second.control);
  diagnostics_[lease->id] = std::move(d);
  return lease->id;
}

absl::Status AgentRegistry::EndDiagnostic(AgentSession* agent, const std::string& lease_id,
                                          std::optional<bool> passed, const std::string& detail) {
  auto it = diagnostics_.find(lease_id);
  if (it == diagnostics_.end() || it->second.agent != agent) {
    // Interrupted: DiagnosticLost closed it and told the agent, which may have finished first.
    return absl::AbortedError(absl::StrCat("diagnostic lease '", lease_id,
                                           "' was interrupted (work was placed on its GPU, or the GPU left "
                                           "service): its outcome is not applied"));
  }
  diagnostics_.erase(it);
  absl::Status st = pool_.EndDiagnostic(lease_id, passed, detail);
  durable_.JournalClose(lease_id, !st.ok()                ? "interrupted"
                                  : !passed.has_value() ? "diagnostic not concluded"
                                  : *passed             ? "diagnostic passed"
                                                        : "diagnostic failed");
  return st;
}

bool AgentRegistry::DiagnosticLost(const std::string& lease_id, const std::string& why) {
  auto it = diagnostics_.find(lease_id);
  if (it == diagnostics_.end()) return false;
  std::optional<rpc::AgentControl::Client> control = std::move(it->second.control);
  diagnostics_.erase(it);
  durable_.JournalClose(lease_id, absl::StrCat("interrupted: ", why));
  if (control.has_value()) {  // the agent that tests (an agent too old to be told has none)
    auto req = control->stopDiagnosticRequest();
    req.setLeaseId(lease_id);
    req.setWhy(why);
    req.send().detach([](kj::Exception&&) {});  // an agent gone meanwhile stopped testing
  }
  return true;
}

void AgentRegistry::AbandonDiagnostics(AgentSession* agent, std::optional<int> gpu) {
  for (auto it = diagnostics_.begin(); it != diagnostics_.end();) {
    if (it->second.agent != agent || (gpu.has_value() && it->second.gpu != *gpu)) {
      ++it;
      continue;
    }
    (void)pool_.EndDiagnostic(it->first, std::nullopt, "");  // Aborted when interrupted meanwhile
    durable_.JournalClose(it->first, gpu.has_value() ? "its end never arrived" : "its agent went away");
    it = diagnostics_.erase(it);
  }
}

absl::string_view AgentRegistry::StateOf(const std::string& node) const {
  auto agent = agents_.find(node);
  return agent == agents_.end() ? "down" : agent->second.silent ? "silent" : "up";
}

}  // namespace gpupool::runtime
