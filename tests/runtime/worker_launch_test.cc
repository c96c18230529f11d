// The launch path of a job's workers (issue 20), with real parts over 127.0.0.1: a head of two
// nodes, NodeAgents in this process (and, for the parent-death case, a real `gpupool agent`
// process), a job's RemotePool, and real worker processes (worker_probe, which reports what it
// was given). What is checked: a worker starts with its secret through an inherited pipe (and
// nowhere in /proc), in its own process group, where and as whom it was told; the refusals name
// what was wrong; and no worker outlives its job's session or its agent.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/agent/node_agent.h"
#include "runtime/agent/worker_launcher.h"
#include "runtime/client/remote_pool.h"
#include "runtime/rpc/lease_codec.h"
#include "runtime/rpc/rpc_connection.h"
#include "runtime/service/pool_server.h"
#include "runtime/service/pool_service.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/test_head.h"

extern char** environ;

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

constexpr const char* kConfig = R"(
teams:
  - name: default
  - name: nobodies
    run_as: nobody
)";

// Whether `pid` is a live process: its /proc entry is there and it is not a zombie (a worker
// orphaned by a killed agent is a zombie until this container's init reaps it, if ever).
bool Alive(int pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' && line[paren + 2] != 'X';
}

// Whether `pid` has no /proc entry any more: dead and reaped.
bool Reaped(int pid) { return !std::filesystem::exists(absl::StrCat("/proc/", pid)); }

// Whether `pid` is dead within `limit`; `reaped`: gone from the process table too (an agent that
// lives reaps its workers; one that was killed cannot).
bool GoneWithin(int pid, std::chrono::milliseconds limit, bool reaped = true) {
  const auto deadline = Clock::now() + limit;
  while (reaped ? !Reaped(pid) : Alive(pid)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The probe's report (worker_probe.cc), once it has written it.
std::multimap<std::string, std::string> WaitForReport(const std::string& path) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(path) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::multimap<std::string, std::string> report;
  std::istringstream in(ReadWhole(path));
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) report.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  EXPECT_FALSE(report.empty()) << "the worker wrote no report at " << path;
  return report;
}

std::string One(const std::multimap<std::string, std::string>& report, const std::string& key) {
  auto it = report.find(key);
  return it == report.end() ? std::string("<missing>") : it->second;
}

class WorkerLaunches : public ::testing::Test {
 protected:
  void SetUp() override {
    PoolServiceOptions o;
    o.remote_nodes = {SimulatedNode("n0").nodes[0], SimulatedNode("n1").nodes[0]};
    o.config_text = kConfig;
    auto pool = PoolService::Start(o);
    ASSERT_TRUE(pool.ok()) << pool.status();
    PoolServerOptions so;
    so.team_tokens = {{"default", "team-token"}, {"nobodies", "nobody-token"}};
    so.agent_token = "agent-token";
    auto server = PoolServer::Start(*std::move(pool), so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    // World-writable (and enterable): a worker that runs as `nobody` writes its report here.
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("gpupool_workers_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::filesystem::permissions(dir_, std::filesystem::perms::all);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<NodeAgent> Agent(const std::string& node, bool allow_root_workers = true) {
    auto agent = NodeAgent::Start(NodeAgentOptions{.port = server_->port(), .token = "agent-token",
                                                   .node = SimulatedNode(node),
                                                   .heartbeat_interval = std::chrono::milliseconds(100),
                                                   .allow_root_workers = allow_root_workers});
    EXPECT_TRUE(agent.ok()) << agent.status();
    return agent.ok() ? *std::move(agent) : nullptr;
  }
  // A job's session; unless `lease_on_n0` is false, holding a lease on node n0 (the head starts
  // a job's workers only where it holds one).
  std::unique_ptr<RemotePool> Job(const std::string& team = "default", const std::string& token = "team-token",
                                  bool lease_on_n0 = true) {
    auto c = RemotePool::Connect({.port = server_->port(), .team = team, .token = token});
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    if (lease_on_n0) {
      pool::LeaseRequest r;
      r.id = absl::StrCat("hold-", ++requests_);
      r.team = team;
      r.slot = pool::SlotShape::Fraction(/*memory_mib=*/1024, /*compute_milli=*/100);
      r.required_labels = {{"node", "n0"}};
      auto& recorder = recorders_.emplace_back(std::make_unique<Recorder>());
      absl::Status st = (*c)->Request(r, recorder.get());
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_TRUE(recorder->WaitFor("granted")) << "no lease on n0 for the job";
    }
    return *std::move(c);
  }
  // A probe on `node` for `job`, reporting to <dir>/<name>.
  WorkerLaunch Probe(const std::string& node, const std::string& name, const std::string& job = "job-1") {
    return WorkerLaunch{.node = node, .job = job, .executable = WORKER_PROBE_PATH,
                        .args = {absl::StrCat("--out=", Report(name))}, .cwd = dir_.string(),
                        .env = {{"PROBE_VAR", "from the job"}}, .secret = "s3cret-of-job-1"};
  }
  std::string Report(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::unique_ptr<Recorder>> recorders_;  // outlive the jobs (declared first)
  int requests_ = 0;
  std::unique_ptr<PoolServer> server_;
  std::filesystem::path dir_;
};

TEST_F(WorkerLaunches, AWorkerGetsItsSecretThroughAnInheritedPipeAndNowhereElse) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  WorkerLaunch launch = Probe("n0", "w1");
  launch.args.push_back("an argument with spaces");
  absl::StatusOr<int> pid = job->StartWorker(launch);
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto report = WaitForReport(Report("w1"));

  EXPECT_EQ(One(report, "secret"), "s3cret-of-job-1");
  const int fd = std::stoi(One(report, "secret_fd"));
  EXPECT_GE(fd, 3);
  EXPECT_EQ(One(report, "pid"), std::to_string(*pid));
  EXPECT_EQ(One(report, "pgid"), std::to_string(*pid)) << "the worker leads a process group of its own";
  EXPECT_EQ(One(report, "ppid"), std::to_string(::getpid())) << "the agent (this process) is its parent";
  EXPECT_EQ(One(report, "cwd"), std::filesystem::canonical(dir_).string());
  EXPECT_EQ(One(report, "stdin"), "/dev/null");
  EXPECT_EQ(One(report, "probe_var"), "from the job");
  std::vector<std::string> args;
  for (auto [it, end] = report.equal_range("arg"); it != end; ++it) args.push_back(it->second);
  EXPECT_THAT(args, ::testing::ElementsAre(absl::StrCat("--out=", Report("w1")), "an argument with spaces",
                                           absl::StrCat("--gpupool-worker-secret-fd=", fd)));

  // What other users of the machine can read of a process says nothing of the secret.
  EXPECT_THAT(ReadWhole(absl::StrCat("/proc/", *pid, "/cmdline")), Not(HasSubstr("s3cret")));
  EXPECT_THAT(ReadWhole(absl::StrCat("/proc/", *pid, "/environ")), Not(HasSubstr("s3cret")));
  EXPECT_THAT(ReadWhole(absl::StrCat("/proc/", *pid, "/environ")), HasSubstr("PROBE_VAR=from the job"));
  EXPECT_THAT(agent->workers().WorkersOf("job-1"), ::testing::ElementsAre(*pid));

  // A directory missing on the node: the worker starts in "/".
  WorkerLaunch elsewhere = Probe("n0", "w2");
  elsewhere.cwd = "/no/such/directory";
  ASSERT_TRUE(job->StartWorker(elsewhere).ok());
  EXPECT_EQ(One(WaitForReport(Report("w2")), "cwd"), "/");
}

TEST_F(WorkerLaunches, AMissingOrNonExecutableBinaryIsRefusedNamingItAndTheNode) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  WorkerLaunch missing = Probe("n0", "never");
  missing.executable = "/no/such/gpupool-worker";
  absl::StatusOr<int> pid = job->StartWorker(missing);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("/no/such/gpupool-worker does not exist on node n0"));

  const std::string plain = Report("not-a-program");
  std::ofstream(plain) << "#!/bin/sh\nexit 0\n";
  ::chmod(plain.c_str(), 0644);
  WorkerLaunch not_executable = Probe("n0", "never");
  not_executable.executable = plain;
  pid = job->StartWorker(not_executable);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr(plain + " on node n0 is not executable"));

  // Executable, but exec itself fails (no interpreter line, not a binary): the error comes back
  // from the child through the status pipe, instead of a pid of a process already dead.
  const std::string garbage = Report("garbage");
  std::ofstream(garbage) << "this is not a program\n";
  ::chmod(garbage.c_str(), 0755);
  WorkerLaunch bad_exec = Probe("n0", "never");
  bad_exec.executable = garbage;
  pid = job->StartWorker(bad_exec);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("did not start on node n0: exec: Exec format error"));
  EXPECT_TRUE(agent->workers().WorkersOf("job-1").empty());
}

TEST_F(WorkerLaunches, ANodeWithoutAnAgentIsNamed) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n1", "never"));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kUnavailable) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("node 'n1' has no agent"));

  pid = job->StartWorker(Probe("n9", "never"));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kNotFound) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("node 'n9' is not in this pool"));

  WorkerLaunch no_secret = Probe("n0", "never");
  no_secret.secret.clear();
  pid = job->StartWorker(no_secret);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kInvalidArgument) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("no secret"));
}

TEST_F(WorkerLaunches, AJobGetsWorkersOnlyOnNodesWhereItHoldsALease) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job("default", "team-token", /*lease_on_n0=*/false);
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "never"));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("this job holds no lease on node 'n0'"));
  EXPECT_TRUE(agent->workers().WorkersOf("job-1").empty());
}

TEST_F(WorkerLaunches, ARootAgentRefusesRootWorkersUnlessAllowed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs an agent running as root (this test runs as uid " << ::geteuid() << ")";
  {
    auto agent = Agent("n0", /*allow_root_workers=*/false);
    ASSERT_NE(agent, nullptr);
    auto job = Job();
    ASSERT_NE(job, nullptr);
    absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "never"));
    EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition) << pid.status();
    EXPECT_THAT(pid.status().message(),
                HasSubstr("the agent runs as root; team default has no run_as user in the configuration "
                          "(or start the agent with --allow-root-workers)"));
  }
  auto agent = Agent("n0", /*allow_root_workers=*/true);
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "root"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(One(WaitForReport(Report("root")), "uid"), "0");
}

TEST_F(WorkerLaunches, ATeamsWorkersRunAsItsRunAsUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs an agent running as root to switch users";
  passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr) << "this machine has no user 'nobody'";
  const uid_t nobody_uid = nobody->pw_uid;
  auto agent = Agent("n0", /*allow_root_workers=*/false);
  ASSERT_NE(agent, nullptr);
  auto job = Job("nobodies", "nobody-token");
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "nobody"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto report = WaitForReport(Report("nobody"));
  EXPECT_EQ(One(report, "uid"), std::to_string(nobody_uid));
  EXPECT_EQ(One(report, "secret"), "s3cret-of-job-1") << "the pipe is readable after the switch";
  std::string status = ReadWhole(absl::StrCat("/proc/", *pid, "/status"));
  EXPECT_THAT(status, HasSubstr(absl::StrCat("Uid:\t", nobody_uid, "\t", nobody_uid)));
}

TEST_F(WorkerLaunches, EndingTheJobsSessionStopsItsWorkersEvenOnesThatIgnoreSigterm) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> polite = job->StartWorker(Probe("n0", "polite"));
  ASSERT_TRUE(polite.ok()) << polite.status();
  WorkerLaunch stubborn_launch = Probe("n0", "stubborn");
  stubborn_launch.args.push_back("--ignore-term");
  absl::StatusOr<int> stubborn = job->StartWorker(stubborn_launch);
  ASSERT_TRUE(stubborn.ok()) << stubborn.status();
  WaitForReport(Report("polite"));
  WaitForReport(Report("stubborn"));  // SIGTERM ignored from here on
  ASSERT_TRUE(Alive(*polite) && Alive(*stubborn));

  job.reset();  // the connection closes: the head ends the session and tells the agent
  EXPECT_TRUE(GoneWithin(*polite, std::chrono::seconds(2)));
  EXPECT_TRUE(GoneWithin(*stubborn, std::chrono::seconds(2))) << "SIGKILL follows SIGTERM after a second";
  EXPECT_TRUE(agent->workers().WorkersOf("job-1").empty()) << "reaped";
}

TEST_F(WorkerLaunches, DestroyingTheAgentStopsItsWorkers) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "w"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  WaitForReport(Report("w"));
  agent.reset();  // returns once its workers are reaped
  EXPECT_TRUE(Reaped(*pid));
}

TEST_F(WorkerLaunches, ASessionStartsWorkersOfOneJobOnly) {
  auto agent = Agent("n0");
  ASSERT_NE(agent, nullptr);
  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> mine = job->StartWorker(Probe("n0", "mine", "job-1"));
  ASSERT_TRUE(mine.ok()) << mine.status();
  absl::StatusOr<int> other = job->StartWorker(Probe("n0", "never", "job-2"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied) << other.status();
  EXPECT_THAT(other.status().message(), HasSubstr("starts workers of job 'job-1'; it cannot start workers of job 'job-2'"));

  // Another session (another job, of another team here) cannot name job-1 either: its end would
  // stop job-1's workers.
  auto intruder = Job("nobodies", "nobody-token");
  ASSERT_NE(intruder, nullptr);
  other = intruder->StartWorker(Probe("n0", "never", "job-1"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied) << other.status();
  EXPECT_THAT(other.status().message(), HasSubstr("job 'job-1' already has workers started by another session"));
  intruder.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(Alive(*mine)) << "the intruder's end stopped nothing of job-1";
  EXPECT_FALSE(std::filesystem::exists(Report("never")));
}

// An agent that registers without an AgentControl capability (one built before workers existed).
TEST_F(WorkerLaunches, AnAgentTooOldToStartWorkersIsNamed) {
  std::optional<rpc::AgentSession::Client> session;  // the loop thread's
  std::string bytes = rpc::EncodeNodes(SimulatedNode("n0"));
  auto old_agent = RpcConnection::Connect(
      RpcConnectionOptions{.port = server_->port()},
      [&](rpc::PoolService::Client head, kj::WaitScope& wait) -> absl::Status {
        auto req = head.registerAgentRequest();
        req.setToken("agent-token");
        req.setInventory(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
        auto resp = req.send().wait(wait);
        absl::Status st = rpc::DecodeStatus(resp.getStatus());
        if (st.ok()) session = resp.getAgent();
        return st;
      });
  ASSERT_TRUE(old_agent.ok()) << old_agent.status();
  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "never"));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("the agent of node 'n0' is too old to start workers"));
  (*old_agent)->Sync([&] { session.reset(); });
}

// A real `gpupool agent` process killed with SIGKILL: it can neither stop its workers nor tell
// the head; the parent-death signal kills them.
TEST_F(WorkerLaunches, AWorkerDiesWithItsKilledAgentProcess) {
  std::vector<std::string> args = {GPUPOOL_CLI_PATH, "agent", "--head", absl::StrCat("127.0.0.1:", server_->port()),
                                   "--node", "n0", "--simulate", "2xH100-80GB", "--token", "agent-token",
                                   "--heartbeat-ms", "100", "--allow-root-workers"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t agent_pid = 0;
  ASSERT_EQ(::posix_spawn(&agent_pid, GPUPOOL_CLI_PATH, nullptr, nullptr, argv.data(), environ), 0);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (server_->agents_connected() == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(server_->agents_connected(), 1u) << "the agent process did not register";

  auto job = Job();
  ASSERT_NE(job, nullptr);
  absl::StatusOr<int> pid = job->StartWorker(Probe("n0", "w"));
  if (!pid.ok()) ::kill(agent_pid, SIGKILL);
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto report = WaitForReport(Report("w"));
  EXPECT_EQ(One(report, "ppid"), std::to_string(agent_pid));
  EXPECT_EQ(One(report, "secret"), "s3cret-of-job-1");

  ASSERT_TRUE(Alive(*pid));
  ASSERT_EQ(::kill(agent_pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(agent_pid, &status, 0), agent_pid);
  EXPECT_TRUE(GoneWithin(*pid, std::chrono::seconds(2), /*reaped=*/false)) << "the worker outlived its agent";
}

// The head asks for a start, then (the job gone) for a stop; the stop may reach the launcher
// while the start still waits for its thread. Whichever way they interleave, no worker survives.
TEST(WorkerLauncherOrder, AStopAfterAStartThatHasNotHappenedYetStillStopsIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / absl::StrCat("gpupool_order_", ::getpid());
  std::filesystem::create_directories(dir);
  WorkerLauncher launcher({.node = "n0", .allow_root_workers = true});
  for (int round = 0; round < 20; ++round) {
    std::promise<absl::StatusOr<int>> answer;
    launcher.StartAsync(WorkerLaunch{.node = "n0", .job = "job-1", .executable = WORKER_PROBE_PATH,
                                     .args = {absl::StrCat("--out=", (dir / std::to_string(round)).string())},
                                     .cwd = "/", .env = {}, .secret = "k"},
                        "", "default", [&answer](absl::StatusOr<int> pid) { answer.set_value(std::move(pid)); });
    launcher.StopJob("job-1");
    absl::StatusOr<int> pid = answer.get_future().get();
    if (pid.ok()) {
      EXPECT_TRUE(GoneWithin(*pid, std::chrono::seconds(2))) << "round " << round;
    } else {
      EXPECT_EQ(pid.status().code(), absl::StatusCode::kAborted) << pid.status();
      EXPECT_THAT(pid.status().message(), HasSubstr("job job-1 was stopped before its worker started"));
    }
  }
  EXPECT_TRUE(launcher.WorkersOf("job-1").empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpupool::runtime
