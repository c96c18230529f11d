// `gpupool head` and `gpupool agent`: the daemons of a shared pool (DESIGN §3). The head serves
// the pool's nodes (declared by its configuration or --simulate, as slurm.conf declares Slurm's)
// to the jobs of many teams; each node's agent registers the node and keeps it alive.
//
//   gpupool head --simulate 4xH100-80GB --node-count 2 --tokens tokens --journal head.db
//                --listen 127.0.0.1:7070
//   gpupool agent --head 127.0.0.1:7070 --node node-1 --simulate 4xH100-80GB --token-file agent.token
//                 --http-listen 127.0.0.1:9401     # the node's device metrics (agent_http.h)
//
// The agent starts jobs' workers on the head's word, as the team's `run_as` user when it runs as
// root (and as root only with --allow-root-workers); they die with it.
//
// Both run until SIGINT or SIGTERM.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "pool/devices/driver_selection.h"
#include "runtime/agent/node_agent.h"
#include "runtime/cli/agent_http.h"
#include "runtime/cli/agent_health_flags.h"
#include "runtime/cli/command.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/pool_server.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/rpc/node_codec.h"

namespace gpupool::cli {
namespace {

// Blocks SIGINT/SIGTERM in every thread started after this, so sigwait sees them.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

std::string ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw CommandFailed(absl::StrCat("cannot read the ", what, " file '", path, "'"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "name: token" per line ('#' comments); the name "agents" is the node agents' token, the name
// "operators" the operators' (the whole pool: every team's rows), every other name a team's.
// Tokens live in their own file, readable by the head's user only, not in the pool's
// configuration. One token per name, and no token for two names (it would be ambiguous who reads).
std::map<std::string, std::string> ParseTokens(const std::string& path) {
  std::map<std::string, std::string> tokens;
  std::istringstream in(ReadFile(path, "tokens"));
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::string text(absl::StripAsciiWhitespace(line));
    if (text.empty()) continue;
    size_t colon = text.find(':');
    std::string name = colon == std::string::npos ? "" : std::string(absl::StripAsciiWhitespace(text.substr(0, colon)));
    std::string token = colon == std::string::npos ? "" : std::string(absl::StripAsciiWhitespace(text.substr(colon + 1)));
    if (name.empty() || token.empty()) {
      throw CommandFailed(absl::StrCat(path, ":", number, ": expected 'team: token', got '", text, "'"));
    }
    if (token.size() < 16) {
      throw CommandFailed(absl::StrCat(path, ":", number, ": the token for '", name, "' is shorter than 16 characters"));
    }
    if (name[0] == '_') {  // the pool's own team (its diagnostics: runtime/service/diagnostic_holds.h)
      throw CommandFailed(absl::StrCat(path, ":", number, ": '", name,
                                       "': names starting with '_' are the pool's own; name the team otherwise"));
    }
    if (!tokens.emplace(name, token).second) {
      throw CommandFailed(absl::StrCat(path, ":", number, ": a second token for '", name, "'"));
    }
    for (const auto& [other, t] : tokens) {
      if (other != name && t == token) {
        throw CommandFailed(absl::StrCat(path, ":", number, ": '", name, "' has the same token as '", other,
                                         "'; every name needs a token of its own"));
      }
    }
  }
  return tokens;
}

struct HeadFlags {
  std::string config_path;
  std::string simulate;
  int node_count = 1;
  std::string tokens_path;
  std::string listen = "127.0.0.1:7070";
  std::string port_file;
  std::string http_port_file;
  double clock_speed = 1.0;
  int heartbeat_timeout_ms = 3000;
  std::string journal;
  double reclaim_window_s = 30;
  bool insecure_network = false;
  std::string http_listen;  // empty: no HTTP endpoint
  double history_interval_s = 60;
  int history_retention_days = 30;
  pool::HealthPolicy health;  // when a quarantined GPU returns, when it is given up
  std::string placement_policy = "gpupool";
};

void RunHead(const HeadFlags& flags) {
  sigset_t stop = BlockStopSignals();
  std::map<std::string, std::string> tokens = ParseTokens(flags.tokens_path);
  std::string host;
  uint16_t port = 0;
  if (flags.listen.rfind(":0") == flags.listen.size() - 2) {
    host = flags.listen.substr(0, flags.listen.size() - 2);  // port 0: the system picks
  } else if (absl::Status st = runtime::ParseHostPort(flags.listen, &host, &port); !st.ok()) {
    throw CommandFailed(std::string(st.message()));
  }
  // The nodes this head serves, as a simulated driver describes them.
  pool::PoolConfig config;
  std::string config_text;
  if (!flags.config_path.empty()) {
    config_text = ReadFile(flags.config_path, "configuration");
    absl::StatusOr<pool::PoolConfig> parsed = pool::ParsePoolConfig(config_text, flags.config_path);
    if (!parsed.ok()) throw CommandFailed(std::string(parsed.status().message()));
    config = *std::move(parsed);
  }
  absl::StatusOr<pool::SelectedDriver> driver = pool::SelectDriver(pool::DriverChoice{
      .driver = "simulated", .simulation_spec = flags.simulate, .node_count = flags.node_count,
      .config = flags.config_path.empty() ? nullptr : &config});
  if (!driver.ok()) throw CommandFailed(std::string(driver.status().message()));
  absl::StatusOr<std::vector<pool::DiscoveredNode>> nodes = driver->driver->Discover();
  if (!nodes.ok()) throw CommandFailed(std::string(nodes.status().message()));
  if (flags.health.passes_to_return < 1 || flags.health.failures_to_fail < 1) {
    throw CommandFailed("--health-passes-to-return and --health-failures-to-fail must be at least 1");
  }
  absl::StatusOr<std::unique_ptr<runtime::PoolService>> pool = runtime::PoolService::Start(runtime::PoolServiceOptions{
      .config_text = config_text, .clock_speed = flags.clock_speed, .remote_nodes = *nodes,
      .health_policy = flags.health, .placement_policy = flags.placement_policy});
  if (!pool.ok()) throw CommandFailed(std::string(pool.status().message()));
  runtime::PoolServerOptions so;
  so.address = host;
  so.allow_network = flags.insecure_network;
  so.port = port;
  so.heartbeat_timeout = std::chrono::milliseconds(flags.heartbeat_timeout_ms);
  so.journal_path = flags.journal;
  if (!(flags.reclaim_window_s >= 0) || flags.reclaim_window_s > 86400 * 365) {
    throw CommandFailed(absl::StrCat("--reclaim-window-s must be between 0 and a year of seconds, not ",
                                     flags.reclaim_window_s));
  }
  so.reclaim_window = std::chrono::milliseconds(static_cast<int64_t>(flags.reclaim_window_s * 1000));
  if (flags.history_interval_s < 0 || flags.history_retention_days < 1) {
    throw CommandFailed("--history-interval-s must be >= 0 (0: none) and --history-retention-days >= 1");
  }
  so.history_interval = std::chrono::milliseconds(static_cast<int64_t>(flags.history_interval_s * 1000));
  so.history_retention = std::chrono::hours(24 * flags.history_retention_days);
  if (!flags.http_listen.empty()) {
    so.http = true;
    ParseListenAddress(flags.http_listen, "--http-listen", &so.http_address, &so.http_port);
  }
  for (const auto& [name, token] : tokens) {
    if (name == "agents") {
      so.agent_token = token;
    } else if (name == "operators") {
      so.operator_token = token;
    } else {
      so.team_tokens[name] = token;
    }
  }
  int gpus = (*pool)->inventory().gpu_count();
  absl::StatusOr<std::unique_ptr<runtime::PoolServer>> server = runtime::PoolServer::Start(*std::move(pool), so);
  if (!server.ok()) throw CommandFailed(std::string(server.status().message()));
  if (!flags.port_file.empty()) {
    std::ofstream(flags.port_file) << (*server)->port() << "\n";
  }
  if (!flags.http_port_file.empty()) {
    std::ofstream(flags.http_port_file) << (*server)->http_port() << "\n";
  }
  if (so.http) {
    std::cout << "gpupool head: HTTP (/metrics, /api/v1, the dashboard at /) on " << so.http_address << ":"
              << (*server)->http_port() << std::endl;
  }
  std::cout << "gpupool head: listening on " << host << ":" << (*server)->port() << "; " << nodes->size()
            << " nodes, " << gpus << " GPUs, down until their agents register; " << so.team_tokens.size()
            << " teams" << (so.agent_token.empty() ? "; no agent token: agents are refused" : "")
            << (so.operator_token.empty() ? "; no operators' token" : "") << std::endl;
  int signal = 0;
  sigwait(&stop, &signal);
  std::cout << "gpupool head: stopping (" << strsignal(signal) << ")" << std::endl;
}

struct AgentFlags {
  std::string head;
  std::string node;
  std::string simulate;
  std::string token;
  std::string token_file;
  int heartbeat_ms = 500;
  bool allow_root_workers = false;
  AgentHttpFlags http;
  AgentHealthFlags health;  // agent_health_flags.h
};

absl::StatusOr<std::unique_ptr<runtime::NodeAgent>> StartAgent(runtime::NodeAgentOptions options,
                                                               const AgentHealthFlags& flags, const AgentHealth& health) {
  ApplyAgentHealth(flags, health, options);
  return runtime::NodeAgent::Start(std::move(options));
}

void RunAgent(const AgentFlags& flags) {
  sigset_t stop = BlockStopSignals();
  std::string host;
  uint16_t port = 0;
  if (absl::Status st = runtime::ParseHostPort(flags.head, &host, &port); !st.ok()) throw CommandFailed(std::string(st.message()));
  std::string token = flags.token;
  if (!flags.token_file.empty()) token = std::string(absl::StripAsciiWhitespace(ReadFile(flags.token_file, "token")));
  if (token.empty()) throw CommandFailed("the agent needs the head's agent token (--token-file or --token)");
  absl::StatusOr<pool::SelectedDriver> driver = pool::SelectDriver(
      pool::DriverChoice{.driver = flags.simulate.empty() ? "" : "simulated", .simulation_spec = flags.simulate});
  if (!driver.ok()) throw CommandFailed(std::string(driver.status().message()));
  if (!driver->notice.empty()) std::cerr << driver->notice << "\n";
  absl::StatusOr<std::vector<pool::DiscoveredNode>> nodes = driver->driver->Discover();
  if (!nodes.ok() || nodes->size() != 1) {
    throw CommandFailed(nodes.ok() ? "the driver found no single node" : std::string(nodes.status().message()));
  }
  rpc::DiscoveredPool mine{std::string(driver->driver->name()), {(*nodes)[0]}};
  std::string driver_node = mine.nodes[0].name;
  mine.nodes[0].name = flags.node;
  // Up before the head is reached, and kept across reconnections.
  std::unique_ptr<runtime::DeviceMetricsEndpoint> metrics = StartAgentHttp(
      flags.http, runtime::DeviceMetricsSource{.driver = driver->driver.get(), .driver_node = driver_node,
                                               .gpus = mine.nodes[0].gpus, .hostname = flags.node});
  AgentHealth health = PrepareAgentHealth(flags.health, *driver->driver, driver_node, (*nodes)[0]);
  // Reconnects with a pause when the head goes away (a restarted head takes its nodes back).
  while (true) {
    absl::StatusOr<std::unique_ptr<runtime::NodeAgent>> agent = StartAgent(runtime::NodeAgentOptions{
        .host = host, .port = port, .token = token, .node = mine, .driver = driver->driver.get(),
        .driver_node = driver_node, .heartbeat_interval = std::chrono::milliseconds(flags.heartbeat_ms),
        .allow_root_workers = flags.allow_root_workers}, flags.health, health);
    if (!agent.ok() && !absl::IsUnavailable(agent.status())) throw CommandFailed(std::string(agent.status().message()));
    if (agent.ok()) {
      std::cout << "gpupool agent: node " << flags.node << " (" << mine.nodes[0].gpus.size() << " GPUs) registered with "
                << flags.head << std::endl;
      if (health.injector != nullptr) health.injector->Start();  // its clock starts at the first registration
    } else {
      std::cerr << "gpupool agent: " << agent.status().message() << "; retrying" << std::endl;
    }
    // Wait for a stop signal, checking the connection every 200 ms.
    timespec tick{0, 200'000'000};
    while (true) {
      int signal = sigtimedwait(&stop, nullptr, &tick);
      if (signal > 0) {
        std::cout << "gpupool agent: stopping (" << strsignal(signal) << ")" << std::endl;
        return;
      }
      if (!agent.ok() || !(*agent)->connected()) break;
    }
    if (agent.ok()) std::cerr << "gpupool agent: lost the head at " << flags.head << "; reconnecting" << std::endl;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace

void RegisterHeadCommand(CLI::App& app) {
  auto flags = std::make_shared<HeadFlags>();
  CLI::App* head = app.add_subcommand("head", "Serve a shared pool to many jobs and teams (a daemon)");
  head->add_option("--config", flags->config_path, "YAML: teams, quotas, priority classes, simulated nodes");
  head->add_option("--simulate", flags->simulate, "the nodes, COUNTxMODEL per node (when the config has none)");
  head->add_option("--node-count", flags->node_count, "how many such nodes (node-0, node-1, ...)");
  head->add_option("--tokens", flags->tokens_path,
                   "file of 'team: token' lines; 'agents: token' for node agents, 'operators: token' for the whole view")
      ->required();
  head->add_option("--listen", flags->listen, "HOST:PORT to listen on (port 0 picks one); loopback unless --insecure-network");
  head->add_flag("--insecure-network", flags->insecure_network,
                 "allow --listen on an address other machines reach: tokens travel unencrypted (no TLS yet)");
  head->add_option("--port-file", flags->port_file, "write the port here once listening");
  head->add_option("--http-listen", flags->http_listen,
                   "HOST:PORT for /metrics, /api/v1 and the dashboard (port 0 picks one); loopback unless --insecure-network");
  head->add_option("--history-interval-s", flags->history_interval_s,
                   "with --journal: sample the pool's history this often (0: never; default 60)");
  head->add_option("--history-retention-days", flags->history_retention_days, "keep the history this long (default 30)");
  head->add_option("--http-port-file", flags->http_port_file, "write the HTTP port here once listening");
  head->add_option("--clock-speed", flags->clock_speed, "pool seconds per real second");
  head->add_option("--heartbeat-timeout-ms", flags->heartbeat_timeout_ms, "a silent agent's node is lost after this");
  head->add_option("--journal", flags->journal, "SQLite file (WAL) for requests, leases and the usage ledger");
  head->add_option("--reclaim-window-s", flags->reclaim_window_s,
                   "with --journal: how long a vanished job's leases are kept for it to reclaim (default 30)");
  head->add_option("--placement-policy", flags->placement_policy,
                   "where the scheduler places single-node requests: gpupool (default, the policy `simulate` "
                   "measures), fgd, best-fit, first-fit, dot-product, random or packing");
  head->add_option("--health-passes-to-return", flags->health.passes_to_return,
                   "diagnostics a quarantined GPU must pass in a row to return to service (default 2)");
  head->add_option("--health-failures-to-fail", flags->health.failures_to_fail,
                   "failed diagnostics after which a GPU out of service is failed until repaired (default 3)");
  head->callback([flags] { RunHead(*flags); });

  auto aflags = std::make_shared<AgentFlags>();
  CLI::App* agent = app.add_subcommand("agent", "Register this node's GPUs with a head and keep them alive (a daemon)");
  agent->add_option("--head", aflags->head, "the head's HOST:PORT")->required();
  agent->add_option("--node", aflags->node, "this node's name in the head's configuration")->required();
  agent->add_option("--simulate", aflags->simulate, "simulated GPUs, COUNTxMODEL (default: the real ones)");
  agent->add_option("--token-file", aflags->token_file, "file holding the head's agent token");
  agent->add_option("--token", aflags->token, "the agent token (visible in ps: prefer --token-file)");
  agent->add_option("--heartbeat-ms", aflags->heartbeat_ms, "how often to tell the head the node is alive");
  agent->add_flag("--allow-root-workers", aflags->allow_root_workers,
                  "an agent running as root may run a team's workers as root when the team has no run_as user "
                  "(otherwise it refuses them)");
  AddAgentHttpFlags(agent, aflags->http);
  AddAgentHealthFlags(agent, aflags->health);
  agent->callback([aflags] { RunAgent(*aflags); });
}

}  // namespace gpupool::cli
