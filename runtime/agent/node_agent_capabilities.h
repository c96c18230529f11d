// File: runtime/agent/node_agent_capabilities.h
//
// NodeAgent's capabilities from the head (its AgentSession), shared by node_agent.cc and
// node_agent_health.cc. Used on the connection's loop thread only. Internal.
#ifndef GPUPOOL_RUNTIME_AGENT_NODE_AGENT_CAPABILITIES_H_
#define GPUPOOL_RUNTIME_AGENT_NODE_AGENT_CAPABILITIES_H_

#include <optional>

#include "runtime/agent/node_agent.h"
#include "runtime/rpc/pool_service.capnp.h"

namespace gpupool::runtime {

struct NodeAgent::Capabilities {
  std::optional<rpc::AgentSession::Client> session;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_AGENT_NODE_AGENT_CAPABILITIES_H_
