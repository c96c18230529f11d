#include "runtime/bootstrap/pool_join.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pool/devices/device_driver.h"
#include "pool/devices/driver_selection.h"
#include "runtime/agent/node_agent.h"
#include "runtime/client/fresh_token.h"
#include "runtime/service/pool_server.h"
#include "runtime/client/remote_pool.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/rpc/node_codec.h"
#include "runtime/tasks/own_process.h"
#include "transport/mpi_bootstrap.h"

namespace gpupool::runtime {
namespace {

absl::StatusOr<JoinedPool> Embedded(const RuntimeOptions& o) {
  absl::StatusOr<std::unique_ptr<PoolService>> pool = PoolService::Start(PoolServiceOptions{
      .pool = {.driver = o.driver, .simulate = o.simulate, .node_count = o.node_count,
               .config_path = o.config_path},
      .config_text = o.config_text, .clock_speed = o.clock_speed});
  if (!pool.ok()) return pool.status();
  JoinedPool joined;
  joined.embedded = pool->get();
  joined.local_nodes = rpc::DiscoveredNodes((*pool)->inventory());
  joined.driver = (*pool)->driver_name();
  joined.notice = (*pool)->notice();
  joined.pool = *std::move(pool);
  return joined;
}

absl::StatusOr<std::unique_ptr<RemotePool>> ConnectAsTeam(const std::string& host, uint16_t port,
                                                          const RuntimeOptions& o, const std::string& token,
                                                          double reconnect_s) {
  return RemotePool::Connect(RemotePoolOptions{
      .host = host, .port = port, .team = o.team, .token = token,
      .reconnect_for = std::chrono::milliseconds(static_cast<int64_t>(reconnect_s * 1000))});
}

// What a worker of this job is started as: this program (or RuntimeOptions::worker_binary) with
// worker_args; WorkerPool adds gpupool's own flags (the driver's address, the job, the node).
WorkerLaunch WorkerCommand(const RuntimeOptions& o) {
  WorkerLaunch launch;
  launch.executable = o.worker_binary.empty() ? OwnExecutable() : o.worker_binary;
  launch.args = o.worker_args;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) != nullptr) launch.cwd = cwd;
  launch.env = o.worker_env;
  return launch;
}

absl::StatusOr<JoinedPool> Remote(const RuntimeOptions& o) {
  std::string host;
  uint16_t port = 0;
  if (absl::Status st = ParseHostPort(o.pool_address, &host, &port); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<RemotePool>> pool = ConnectAsTeam(host, port, o, o.pool_token, o.pool_reconnect_s);
  if (!pool.ok()) return pool.status();
  std::string node = o.node_name.empty() ? pool::HostName() : o.node_name;
  absl::StatusOr<rpc::DiscoveredPool> mine = (*pool)->DescribeNode(node);
  JoinedPool joined;
  if (mine.ok()) {
    joined.local_nodes = std::move(mine->nodes);
    joined.driver = mine->driver;
    joined.node_label = node;
  } else if (o.local_only || mine.status().code() != absl::StatusCode::kNotFound) {
    return absl::Status(mine.status().code(),
                        absl::StrCat(mine.status().message(),
                                     o.local_only ? " (with local_only, this process runs its tasks on its own node: set "
                                                    "--gpupool-node or GPUPOOL_NODE to the node's name in the pool)"
                                                  : ""));
  } else {
    // A driver off the pool (a laptop, a login node): every GPU task runs in a worker.
    joined.notice = absl::StrCat("node '", node, "' is not in the pool: this process runs no GPU task itself; "
                                 "they run in workers on the pool's nodes");
  }
  joined.pinned = o.local_only;
  if (!o.local_only) {
    RemotePool* remote = pool->get();  // owned by joined.pool, which outlives the workers
    joined.workers = WorkerPlan{
        .launch = WorkerCommand(o),
        // Where the nodes reach this driver: the address it reaches the head from (the host
        // name may resolve to 127.0.1.1, or to nothing, on the nodes).
        .listen_host = IsLoopbackHost(host) ? std::string("127.0.0.1")
                       : !remote->LocalHost().empty() ? remote->LocalHost()
                                                     : pool::HostName(),
        .describe_node = [remote](const std::string& name) -> absl::StatusOr<std::string> {
          absl::StatusOr<rpc::DiscoveredPool> described = remote->DescribeNode(name);
          if (!described.ok()) return described.status();
          return rpc::EncodeNodes(*described);
        }};
  }
  joined.pool = *std::move(pool);
  return joined;
}

}  // namespace

// Rank 0's head outlives its own rank's work until every other rank's agent has gone, so a
// rank 0 that finishes first does not pull the pool from under the others. Outside the anonymous
// namespace: HostedParts (tasks/joined_pool.h) names it.
struct HeadHolder {
  std::unique_ptr<PoolServer> server;
  // Until no more than `own` agents (this rank's) are connected.
  void WaitForOtherRanks(size_t own) {
    auto next_note = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server->agents_connected() > own) {
      if (std::chrono::steady_clock::now() >= next_note) {
        std::fprintf(stderr, "gpupool: rank 0 keeps the job's pool up until %zu other rank(s) finish\n",
                     server->agents_connected() - own);
        next_note += std::chrono::seconds(10);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~HeadHolder() { WaitForOtherRanks(0); }
};

namespace {

// The ranks' data plane: each rank's host and rack allgathered (object fetches go to the nearest
// copy; UCX stays on loopback when every rank is on this host), UCX worker addresses allgathered
// and all connected (JobGroup). `object_key`: the job's, the same on every rank.
// `joined.local_nodes` must be set (its "rack" label is this rank's).
absl::Status ConnectRanks(transport::MpiBootstrap& b, const RuntimeOptions& o, std::string object_key,
                          JoinedPool& joined) {
  std::string rack;
  if (!joined.local_nodes.empty()) {
    auto label = joined.local_nodes[0].labels.find("rack");
    if (label != joined.local_nodes[0].labels.end()) rack = label->second;
  }
  absl::StatusOr<std::vector<std::string>> where = b.AllGather(absl::StrCat(b.host(), "\n", rack));
  if (!where.ok()) return where.status();
  std::vector<transport::PeerPlace> places;
  bool one_host = true;
  for (const std::string& w : *where) {
    std::pair<std::string, std::string> host_rack = absl::StrSplit(w, absl::MaxSplits('\n', 1));
    one_host &= host_rack.first == b.host();
    places.push_back({host_rack.first, host_rack.second});
  }
  absl::StatusOr<std::unique_ptr<JobGroup>> group = JobGroup::OverUcx(
      b.rank(), b.size(), [&b](std::string address) { return b.AllGather(std::move(address)); },
      JobGroupOptions{.collective_timeout = absl::Seconds(o.collective_timeout_s),
                      .net_devices = one_host ? "lo" : "",
                      .places = std::move(places)});
  if (!group.ok()) return group.status();
  joined.group = *std::move(group);
  joined.object_access_key = std::move(object_key);
  joined.rank = b.rank();
  joined.ranks = b.size();
  return absl::OkStatus();
}

// mpirun with a shared head (pool_address): every rank joins the head as a job of its team on its
// own node (GPUPOOL_NODE, else its host), as a single process would; MPI then connects the ranks
// for collectives and objects, as for a job that hosts its own head.
absl::StatusOr<JoinedPool> RemoteUnderMpi(const RuntimeOptions& o) {
  absl::StatusOr<std::unique_ptr<transport::MpiBootstrap>> mpi = transport::MpiBootstrap::Start();
  if (!mpi.ok()) return mpi.status();
  transport::MpiBootstrap& b = **mpi;
  // SPMD: each rank runs the tasks it submits, on its own node (no workers).
  RuntimeOptions spmd = o;
  spmd.local_only = true;
  absl::StatusOr<JoinedPool> joined = Remote(spmd);
  // Every rank learns whether all could join, so none waits for a peer that gave up.
  absl::StatusOr<std::vector<std::string>> all =
      b.AllGather(joined.ok() ? std::string("ok") : absl::StrCat("!", joined.status().message()));
  if (!all.ok()) return all.status();
  for (int r = 0; r < static_cast<int>(all->size()); ++r) {
    if ((*all)[r] != "ok") {
      if (!joined.ok() && r == b.rank()) return joined.status();
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " could not join the pool at ", o.pool_address, ": ", (*all)[r].substr(1)));
    }
  }
  absl::StatusOr<std::string> key = b.rank() == 0 ? FreshToken() : absl::StatusOr<std::string>("");
  absl::StatusOr<std::string> shared_key = b.Broadcast(key.ok() ? *key : std::string("!") + std::string(key.status().message()), 0);
  if (!shared_key.ok()) return shared_key.status();
  if (shared_key->empty() || (*shared_key)[0] == '!') {
    return absl::UnavailableError(absl::StrCat("rank 0 could not make the job's object key: ", shared_key->substr(1)));
  }
  if (absl::Status st = ConnectRanks(b, o, *shared_key, *joined); !st.ok()) return st;
  b.Finish();
  return joined;
}

// What one rank found on its node: the node, described for the others, or why it could not.
struct RankNode {
  std::string failure;  // non-empty: this rank cannot take part
  std::unique_ptr<pool::DeviceDriver> driver;  // moved to JoinedPool::hosted once joined
  rpc::DiscoveredPool mine;
  std::string driver_node;  // the node's name as the driver knows it
  std::string notice;       // the driver's fallback notice, if any
};

// Step 1 of joining under mpirun: this rank's node. Errors are carried through the exchange so
// every rank fails alike instead of some waiting for a peer that gave up.
RankNode DescribeOwnNode(const RuntimeOptions& o, const transport::MpiBootstrap& b) {
  RankNode out;
  if (o.node_count != 1) {
    out.failure = "under mpirun each rank is one node: --gpupool-nodes must be 1";
    return out;
  }
  absl::StatusOr<pool::SelectedDriver> selected = pool::SelectDriver(
      pool::DriverChoice{.driver = o.driver, .simulation_spec = o.simulate, .node_count = 1, .config = nullptr});
  if (!selected.ok()) {
    out.failure = std::string(selected.status().message());
    return out;
  }
  out.driver = std::move(selected->driver);
  out.notice = selected->notice;
  absl::StatusOr<std::vector<pool::DiscoveredNode>> nodes = out.driver->Discover();
  if (!nodes.ok() || nodes->size() != 1) {
    out.failure = nodes.ok() ? "the driver found no node" : std::string(nodes.status().message());
    return out;
  }
  out.mine.driver = std::string(out.driver->name());
  out.mine.nodes.push_back((*nodes)[0]);
  out.driver_node = out.mine.nodes[0].name;
  // Simulated nodes are one per rank; a real node is its host.
  out.mine.nodes[0].name = out.mine.driver == "nvidia" ? b.host() : absl::StrCat("rank-", b.rank());
  return out;
}

// Every rank's node, gathered from every rank; the first rank that could not describe its own
// fails them all, as does a real node two ranks share.
absl::StatusOr<std::vector<pool::DiscoveredNode>> GatherNodes(transport::MpiBootstrap& b, const RankNode& own) {
  absl::StatusOr<std::vector<std::string>> all =
      b.AllGather(own.failure.empty() ? rpc::EncodeNodes(own.mine) : std::string("!") + own.failure);
  if (!all.ok()) return all.status();
  std::vector<pool::DiscoveredNode> nodes;
  for (int r = 0; r < static_cast<int>(all->size()); ++r) {
    const std::string& entry = (*all)[r];
    if (!entry.empty() && entry[0] == '!') {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, " could not describe its node: ", entry.substr(1)));
    }
    absl::StatusOr<rpc::DiscoveredPool> theirs = rpc::DecodeNodes(entry);
    if (!theirs.ok()) return theirs.status();
    for (pool::DiscoveredNode& n : theirs->nodes) {
      for (const pool::DiscoveredNode& seen : nodes) {
        if (seen.name == n.name) {
          return absl::FailedPreconditionError(absl::StrCat(
              "ranks share node '", n.name, "' with real GPUs: run one rank per node"));
        }
      }
      nodes.push_back(std::move(n));
    }
  }
  return nodes;
}

// Step 2, on rank 0: the job's head over every rank's node. Returns what the other ranks need,
// "host:port\nagent-token\nteam-token\nobject-key", or "!why"; `head` is set when it started.
std::string StartJobHead(const RuntimeOptions& o, const transport::MpiBootstrap& b,
                         const std::vector<pool::DiscoveredNode>& nodes, const std::string& driver,
                         std::shared_ptr<HeadHolder>& head) {
  absl::StatusOr<std::string> agent_token = FreshToken();
  absl::StatusOr<std::string> team_token = FreshToken();
  absl::StatusOr<std::string> object_key = FreshToken();
  for (const absl::StatusOr<std::string>* token : {&object_key, &agent_token, &team_token}) {
    if (!token->ok()) return absl::StrCat("!", token->status().message());
  }
  absl::StatusOr<std::unique_ptr<PoolService>> pool =
      PoolService::Start(PoolServiceOptions{.pool = {.config_path = o.config_path}, .config_text = o.config_text,
                                            .clock_speed = o.clock_speed, .remote_nodes = nodes,
                                            .remote_driver = driver});
  if (!pool.ok()) return absl::StrCat("!", pool.status().message());
  // Real GPUs' nodes are their hosts: ranks on several machines need a head and a data plane
  // the other machines can reach, not loopback.
  bool one_host = true;
  for (const pool::DiscoveredNode& n : nodes) one_host &= driver != "nvidia" || n.name == b.host();
  PoolServerOptions so;
  std::string listen_host = !one_host && o.head_listen == "127.0.0.1" ? b.host() : o.head_listen;
  uint16_t listen_port = 0;
  if (listen_host.find(':') != std::string::npos && !ParseHostPort(o.head_listen, &listen_host, &listen_port).ok()) {
    listen_host = o.head_listen;
  }
  so.address = listen_host;
  so.port = listen_port;
  // A head_listen that is not loopback was asked for (ranks on several machines).
  so.allow_network = true;
  so.agent_token = *agent_token;
  // One job: every team it may submit for shares the job's token.
  so.team_tokens[o.team] = *team_token;
  for (const pool::Team& t : (*pool)->config().scheduling.teams) so.team_tokens[t.name] = *team_token;
  absl::StatusOr<std::unique_ptr<PoolServer>> server = PoolServer::Start(*std::move(pool), so);
  if (!server.ok()) return absl::StrCat("!", server.status().message());
  head = std::make_shared<HeadHolder>();
  head->server = *std::move(server);
  return absl::StrCat(listen_host, ":", head->server->port(), "\n", *agent_token, "\n", *team_token, "\n",
                      *object_key);
}

absl::StatusOr<JoinedPool> UnderMpi(const RuntimeOptions& o) {
  absl::StatusOr<std::unique_ptr<transport::MpiBootstrap>> mpi = transport::MpiBootstrap::Start();
  if (!mpi.ok()) return mpi.status();
  transport::MpiBootstrap& b = **mpi;
  JoinedPool joined;
  joined.rank = b.rank();
  joined.ranks = b.size();

  // 1. Every rank's node.
  RankNode own = DescribeOwnNode(o, b);
  joined.notice = own.notice;
  absl::StatusOr<std::vector<pool::DiscoveredNode>> nodes = GatherNodes(b, own);
  if (!nodes.ok()) return nodes.status();

  // 2. Rank 0 hosts the head over every rank's node and shares its address and tokens.
  std::shared_ptr<HeadHolder> head;
  std::string contact = b.rank() == 0 ? StartJobHead(o, b, *nodes, own.mine.driver, head) : std::string();
  absl::StatusOr<std::string> shared = b.Broadcast(contact, 0);
  if (!shared.ok()) return shared.status();
  if (!shared->empty() && (*shared)[0] == '!') {
    return absl::UnavailableError(absl::StrCat("rank 0 could not start the job's pool: ", shared->substr(1)));
  }
  std::vector<std::string> parts = absl::StrSplit(*shared, '\n');
  if (parts.size() != 4) return absl::InternalError("malformed head contact from rank 0");
  std::string host;
  uint16_t port = 0;
  if (absl::Status st = ParseHostPort(parts[0], &host, &port); !st.ok()) return st;

  // 3. Every rank is its node's agent, then a job of the pool like any other.
  if (head != nullptr) {
    joined.hosted.head = head;
    // Rank 0's own agent is still connected when its runtime stops.
    joined.before_stop = [head] { head->WaitForOtherRanks(1); };
  }
  joined.hosted.driver = std::move(own.driver);
  absl::StatusOr<std::unique_ptr<NodeAgent>> agent = NodeAgent::Start(NodeAgentOptions{
      .host = host, .port = port, .token = parts[1], .node = own.mine, .driver = joined.hosted.driver.get(),
      .driver_node = own.driver_node});
  if (!agent.ok()) return agent.status();
  joined.hosted.agent = std::shared_ptr<NodeAgent>(std::move(*agent));
  absl::StatusOr<std::unique_ptr<RemotePool>> pool = ConnectAsTeam(host, port, o, parts[2], /*reconnect_s=*/0);  // rank 0's head ends with the job
  if (!pool.ok()) return pool.status();
  joined.pool = *std::move(pool);
  joined.local_nodes = own.mine.nodes;
  joined.driver = own.mine.driver;
  joined.node_label = own.mine.nodes[0].name;
  // 4. The ranks' data plane for collectives and objects.
  if (absl::Status st = ConnectRanks(b, o, parts[3], joined); !st.ok()) return st;
  // Bootstrap is over: from here a rank's death must not take the others down, so MPI is done.
  b.Finish();
  return joined;
}

}  // namespace

absl::StatusOr<JoinedPool> JoinPool(const RuntimeOptions& options) {
  const bool mpi = options.use_mpi && transport::LaunchedByMpi();
  if (!options.pool_address.empty()) return mpi ? RemoteUnderMpi(options) : Remote(options);
  if (mpi) return UnderMpi(options);
  return Embedded(options);
}

}  // namespace gpupool::runtime
