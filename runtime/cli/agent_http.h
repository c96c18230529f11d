// File: runtime/cli/agent_http.h
//
// `gpupool agent --http-listen HOST:PORT`: the node's device metrics under dcgm-exporter's names
// (runtime/agent/device_metrics.h), served from the agent's start for its whole life, whether or
// not the head is reachable (a scraper watches the GPUs, not the connection). No token, as
// dcgm-exporter has none; loopback unless --insecure-network, as on the head.
//
//   AgentHttpFlags flags;
//   AddAgentHttpFlags(agent_subcommand, flags);
//   auto endpoint = StartAgentHttp(flags, source);  // null without --http-listen
//
// Also ParseListenAddress, the HOST:PORT of a --http-listen (port 0: the system picks one).
// Throws CommandFailed for a malformed address or one that cannot be served.
#ifndef GPUPOOL_RUNTIME_CLI_AGENT_HTTP_H_
#define GPUPOOL_RUNTIME_CLI_AGENT_HTTP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/agent/device_metrics.h"

namespace CLI {
class App;
}  // namespace CLI

namespace gpupool::cli {

struct AgentHttpFlags {
  std::string listen;        // empty: no endpoint
  std::string port_file;     // the port, written once listening
  bool insecure_network = false;
};
void AddAgentHttpFlags(CLI::App* agent, AgentHttpFlags& flags);

// "HOST:PORT" with PORT 1..65535, or 0 for one the system picks. `flag` names the option in errors.
void ParseListenAddress(const std::string& text, const char* flag, std::string* host, uint16_t* port);

// Starts the endpoint (and prints where it listens); null when flags.listen is empty.
std::unique_ptr<runtime::DeviceMetricsEndpoint> StartAgentHttp(const AgentHttpFlags& flags,
                                                               runtime::DeviceMetricsSource source);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_AGENT_HTTP_H_
