#include "runtime/cli/agent_http.h"

#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "runtime/cli/command.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::cli {

void AddAgentHttpFlags(CLI::App* agent, AgentHttpFlags& flags) {
  agent->add_option("--http-listen", flags.listen,
                    "HOST:PORT for this node's device metrics at /metrics, dcgm-exporter's names (port 0 picks "
                    "one); no token; loopback unless --insecure-network");
  agent->add_option("--http-port-file", flags.port_file, "write the HTTP port here once listening");
  agent->add_flag("--insecure-network", flags.insecure_network,
                  "allow --http-listen on an address other machines reach (the metrics need no token)");
}

void ParseListenAddress(const std::string& text, const char* flag, std::string* host, uint16_t* port) {
  // ParseHostPort refuses port 0, which a listener may ask for.
  if (text.size() > 2 && text.rfind(":0") == text.size() - 2) {
    *host = text.substr(0, text.size() - 2);
    *port = 0;
    return;
  }
  if (absl::Status st = runtime::ParseHostPort(text, host, port); !st.ok()) {
    throw CommandFailed(absl::StrCat(flag, ": ", st.message()));
  }
}

std::unique_ptr<runtime::DeviceMetricsEndpoint> StartAgentHttp(const AgentHttpFlags& flags,
                                                               runtime::DeviceMetricsSource source) {
  if (flags.listen.empty()) return nullptr;
  runtime::HttpServerOptions options;
  ParseListenAddress(flags.listen, "--http-listen", &options.address, &options.port);
  options.allow_network = flags.insecure_network;
  const size_t gpus = source.gpus.size();
  absl::StatusOr<std::unique_ptr<runtime::DeviceMetricsEndpoint>> endpoint =
      runtime::DeviceMetricsEndpoint::Start(options, std::move(source));
  if (!endpoint.ok()) throw CommandFailed(absl::StrCat("--http-listen: ", endpoint.status().message()));
  if (!flags.port_file.empty()) std::ofstream(flags.port_file) << (*endpoint)->port() << "\n";
  std::cout << "gpupool agent: device metrics of " << gpus << " GPUs at http://" << options.address << ":"
            << (*endpoint)->port() << "/metrics" << std::endl;
  return *std::move(endpoint);
}

}  // namespace gpupool::cli
