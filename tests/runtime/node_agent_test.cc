// A head of remote nodes and their agents over real sockets on 127.0.0.1: nodes are down until
// their agent registers, registrations are checked against the pool, a node whose agent goes
// away or falls silent loses its leases, and a job joined by address runs its tasks on its node.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpupool/gpupool.h"
#include "gtest/gtest.h"
#include "pool/devices/driver_selection.h"
#include "runtime/agent/node_agent.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/pool_server.h"
#include "runtime/client/remote_pool.h"
#include "runtime/rpc/node_codec.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/test_head.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;

class NodeAgents : public ::testing::Test {
 protected:
  void StartHead(std::chrono::milliseconds heartbeat_timeout = std::chrono::milliseconds(3000)) {
    PoolServiceOptions o;
    o.remote_nodes = {SimulatedNode("n0").nodes[0], SimulatedNode("n1").nodes[0]};
    auto pool = PoolService::Start(o);
    ASSERT_TRUE(pool.ok()) << pool.status();
    PoolServerOptions so;
    so.team_tokens = {{"default", "team-token"}};
    so.agent_token = "agent-token";
    so.heartbeat_timeout = heartbeat_timeout;
    auto server = PoolServer::Start(*std::move(pool), so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  absl::StatusOr<std::unique_ptr<NodeAgent>> Agent(rpc::DiscoveredPool node, std::string token = "agent-token",
                                                   std::chrono::milliseconds heartbeat = std::chrono::milliseconds(100)) {
    return NodeAgent::Start(NodeAgentOptions{.port = server_->port(), .token = std::move(token),
                                             .node = std::move(node), .heartbeat_interval = heartbeat});
  }
  std::unique_ptr<RemotePool> Job() {
    auto c = RemotePool::Connect({.port = server_->port(), .team = "default", .token = "team-token"});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  static pool::LeaseRequest OnNode(const std::string& id, const std::string& node) {
    pool::LeaseRequest r;
    r.id = id;
    r.required_labels["node"] = node;
    return r;
  }
  std::unique_ptr<PoolServer> server_;
};

TEST_F(NodeAgents, ANodeIsDownUntilItsAgentRegisters) {
  StartHead();
  Recorder heard;  // outlives the job
  std::unique_ptr<RemotePool> job = Job();
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->Request(OnNode("r1", "n1"), &heard).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(heard.events().empty()) << "granted on a node without an agent";
  EXPECT_THAT(server_->Report(), HasSubstr(R"("agent":"down")"));

  auto agent = Agent(SimulatedNode("n1"));
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE(heard.WaitFor("granted"));
  EXPECT_EQ(heard.last_lease().gpus.at(0).node, "n1");
  EXPECT_EQ(server_->agents_connected(), 1u);
  EXPECT_THAT(server_->Report(), HasSubstr(R"("agent":"up")"));
}

TEST_F(NodeAgents, RegistrationsAreCheckedAgainstThePool) {
  StartHead();
  auto wrong_token = Agent(SimulatedNode("n0"), "guess");
  EXPECT_EQ(wrong_token.status().code(), absl::StatusCode::kUnauthenticated) << wrong_token.status();

  auto unknown = Agent(SimulatedNode("n9"));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'n9'"));

  auto fewer = Agent(SimulatedNode("n0", "1xH100-80GB"));
  EXPECT_EQ(fewer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fewer.status().message(), HasSubstr("reports 1 GPUs; the pool has 2"));

  auto other_model = Agent(SimulatedNode("n0", "2xA100-80GB"));
  EXPECT_EQ(other_model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_model.status().message(), HasSubstr("A100"));

  EXPECT_EQ(server_->agents_connected(), 0u);
  auto good = Agent(SimulatedNode("n0"));
  EXPECT_TRUE(good.ok()) << good.status();
}

// A second agent for a node whose agent is alive waits its turn: taking over, then leaving,
// would have left the node down with its first agent still heartbeating unheard.
TEST_F(NodeAgents, ASecondAgentForALiveNodeWaitsUntilTheFirstHasGone) {
  StartHead();
  Recorder heard;  // outlives the job
  auto first = Agent(SimulatedNode("n0"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Agent(SimulatedNode("n0"));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr("already has a live agent"));
  EXPECT_TRUE(server_->pool().node_up("n0")) << "the refused newcomer took nothing down";
  std::unique_ptr<RemotePool> job = Job();
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->Request(OnNode("r1", "n0"), &heard).ok());
  ASSERT_TRUE(heard.WaitFor("granted"));
  EXPECT_TRUE(job->Release(heard.last_lease().id).ok());
  job.reset();
  first->reset();  // gone: the next one is taken
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  absl::StatusOr<std::unique_ptr<NodeAgent>> third = absl::UnavailableError("not tried");
  while (!third.ok() && std::chrono::steady_clock::now() < deadline) {
    third = Agent(SimulatedNode("n0"));
    if (!third.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(server_->pool().node_up("n0"));
}

TEST_F(NodeAgents, AnAgentThatGoesAwayTakesItsLeasesWithIt) {
  StartHead();
  Recorder heard, second;  // outlive the job
  std::unique_ptr<RemotePool> job = Job();
  ASSERT_NE(job, nullptr);
  auto agent = Agent(SimulatedNode("n0"));
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE(job->Request(OnNode("r1", "n0"), &heard).ok());
  ASSERT_TRUE(heard.WaitFor("granted"));

  auto before = std::chrono::steady_clock::now();
  agent->reset();  // its connection closes, as when its process dies
  ASSERT_TRUE(heard.WaitFor("lost"));
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(2));
  EXPECT_THAT(heard.events().back(), HasSubstr("node 'n0' is gone: its agent disconnected"));
  EXPECT_THAT(server_->Report(), HasSubstr(R"("agent":"down")"));

  // The lease is the pool's again: releasing it is refused, and a new agent brings the node back.
  EXPECT_FALSE(job->Release(heard.last_lease().id).ok());
  auto again = Agent(SimulatedNode("n0"));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(job->Request(OnNode("r2", "n0"), &second).ok());
  EXPECT_TRUE(second.WaitFor("granted"));
}

TEST_F(NodeAgents, ASilentAgentsNodeIsLostAndReturnsWhenItSpeaks) {
  StartHead(std::chrono::milliseconds(300));
  Recorder heard, second;  // outlive the job, whose leases may still be reported lost at the end
  std::unique_ptr<RemotePool> job = Job();
  ASSERT_NE(job, nullptr);
  // Heartbeats every 2 s: the head, expecting one every 300 ms, takes the node down in between.
  auto agent = Agent(SimulatedNode("n0"), "agent-token", std::chrono::milliseconds(2000));
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE(job->Request(OnNode("r1", "n0"), &heard).ok());
  ASSERT_TRUE(heard.WaitFor("granted"));
  ASSERT_TRUE(heard.WaitFor("lost"));
  EXPECT_THAT(heard.events().back(), HasSubstr("no heartbeat from its agent for 300 ms"));
  EXPECT_THAT(server_->Report(), HasSubstr(R"("agent":"silent")"));
  // The next heartbeat brings it back.
  ASSERT_TRUE(job->Request(OnNode("r2", "n0"), &second).ok());
  EXPECT_TRUE(second.WaitFor("granted"));
}

int NodeOfTask(gpupool::TaskContext& ctx) { return ctx.slots().at(0).node == "n1" ? 1 : 0; }
GPUPOOL_REMOTE(NodeOfTask);

// With local_only (GPUPOOL_LOCAL_ONLY=1) a job keeps today's pinned behaviour; without it, tasks
// go wherever the pool has room (tests/examples/tasks_anywhere.sh runs that with real agents).
TEST_F(NodeAgents, AJobJoinedByAddressWithLocalOnlyRunsItsTasksOnItsNode) {
  StartHead();
  auto n0 = Agent(SimulatedNode("n0"));
  auto n1 = Agent(SimulatedNode("n1"));
  ASSERT_TRUE(n0.ok() && n1.ok());
  RuntimeOptions o;
  o.pool_address = "127.0.0.1:" + std::to_string(server_->port());
  o.pool_token = "team-token";
  o.node_name = "n1";
  o.local_only = true;
  {
    gpupool::Runtime rt = gpupool::Init(o);
    std::vector<gpupool::ObjectRef<int>> refs;
    for (int i = 0; i < 20; ++i) refs.push_back(gpupool::Task(NodeOfTask).Gpus(0.5).Submit());
    for (auto& r : refs) EXPECT_EQ(*gpupool::Get(r), 1) << "a task ran off its process's node";
    // A task that names another node is refused with the reason.
    auto elsewhere = gpupool::Task(NodeOfTask).Gpus(1).Label("node", "n0").Submit();
    try {
      gpupool::Get(elsewhere);
      ADD_FAILURE() << "a task for another node ran";
    } catch (const gpupool::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("this process runs on node 'n1'"));
    }
  }
  o.node_name = "n7";
  try {
    gpupool::Init(o);
    ADD_FAILURE() << "joined as a node the pool does not have";
  } catch (const gpupool::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("GPUPOOL_NODE"));
  }
}

TEST_F(NodeAgents, AShutdownDoesNotWaitForAWorkerThatNeverConnects) {
  StartHead();
  auto n0 = Agent(SimulatedNode("n0"));
  // This machine's tests run as root: the agent must be allowed root workers.
  auto n1 = NodeAgent::Start(NodeAgentOptions{.port = server_->port(), .token = "agent-token",
                                              .node = SimulatedNode("n1"),
                                              .heartbeat_interval = std::chrono::milliseconds(100),
                                              .allow_root_workers = true});
  ASSERT_TRUE(n0.ok() && n1.ok());
  RuntimeOptions o;
  o.pool_address = "127.0.0.1:" + std::to_string(server_->port());
  o.pool_token = "team-token";
  o.node_name = "n0";
  // A worker that starts but never says hello (a node that cannot reach the driver, say): the
  // driver would wait its whole start timeout (30 s) for it.
  o.worker_binary = "/bin/sh";
  o.worker_args = {"-c", "sleep 60", "never-connects"};
  const auto start = std::chrono::steady_clock::now();
  {
    gpupool::Runtime rt = gpupool::Init(o);
    auto on_n1 = gpupool::Task(NodeOfTask).Gpus(1).Label("node", "n1").Submit();
    std::this_thread::sleep_for(std::chrono::seconds(1));  // its lease granted, the worker starting
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 10) << "the shutdown waited for a worker's start";
}

}  // namespace
}  // namespace gpupool::runtime
