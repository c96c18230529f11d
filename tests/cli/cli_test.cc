// The command line as users and the external checker see it: real subprocesses of the built
// `gpupool` binary, their exit codes, stdout and stderr.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <chrono>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

namespace {

using ::testing::HasSubstr;
using nlohmann::json;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result RunCli(const std::string& args, const std::string& env = "") {
  const char* cli = GPUPOOL_CLI_PATH;  // the built binary, set by tests/cli/CMakeLists.txt
  auto dir = std::filesystem::temp_directory_path();
  std::string tag = absl::StrCat("gpupool_cli_", ::getpid());
  auto out = dir / (tag + ".out");
  auto err = dir / (tag + ".err");
  std::string command = absl::StrCat(env, " ", cli, " ", args, " >", out.string(), " 2>", err.string());
  int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

std::string Source(const std::string& rel) {
  return absl::StrCat(std::getenv("GPUPOOL_SOURCE_DIR"), "/", rel);
}

// Machines with an NVIDIA driver behave differently for the automatic choice.
bool NvidiaPresent() { return RunCli("devices --driver nvidia --json").exit_code == 0; }

TEST(DevicesCommand, SimulatedSpecAsJson) {
  Result r = RunCli("devices --simulate 4xH100-80GB,2xl4 --node-count 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  json j = json::parse(r.out);
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][1]["name"], "node-1");
  const json& gpus = j["nodes"][0]["gpus"];
  ASSERT_EQ(gpus.size(), 6u);
  EXPECT_EQ(gpus[0]["index"], 0);
  EXPECT_EQ(gpus[0]["model"], "H100-80GB");
  EXPECT_EQ(gpus[0]["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[0]["memory_mib"], 81559);
  EXPECT_EQ(gpus[0]["mig_mode"], "disabled");
  EXPECT_TRUE(gpus[0]["instances"].is_array());
  EXPECT_EQ(gpus[0]["nvlink_island"], "node-0/nvl0");
  EXPECT_EQ(gpus[0]["health"], "healthy");
  EXPECT_THAT(gpus[0]["uuid"].get<std::string>(), ::testing::StartsWith("GPU-"));
  EXPECT_EQ(gpus[5]["model"], "L4");
  EXPECT_EQ(gpus[5]["mig_mode"], "unsupported");
}

TEST(DevicesCommand, TableWithSummary) {
  Result r = RunCli("devices --simulate 2xA100-40GB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("NODE    GPU  MODEL"));
  EXPECT_THAT(r.out, HasSubstr("node-0  1    A100-40GB"));
  EXPECT_THAT(r.out, HasSubstr("1 node, 2 GPUs (2 A100-40GB); driver simulated"));
}

TEST(DevicesCommand, ConfigFileShowsMigInstances) {
  Result r = RunCli("devices --config " + Source("examples/pool.yaml") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  const json& a100 = j["nodes"][2]["gpus"][0];
  EXPECT_EQ(a100["mig_mode"], "enabled");
  ASSERT_EQ(a100["instances"].size(), 4u);
  EXPECT_EQ(a100["instances"][0]["profile"], "3g.40gb");
  EXPECT_EQ(a100["instances"][0]["start"], 4);
}

TEST(DevicesCommand, NoDriverFallsBackToDefaultSimulatedPoolWithOneLineNotice) {
  if (NvidiaPresent()) GTEST_SKIP() << "an NVIDIA driver is present";
  Result r = RunCli("devices --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("using a simulated pool of 1 node x 8 H100-80GB"));
  json j = json::parse(r.out);
  EXPECT_EQ(j["driver"], "simulated");
  EXPECT_EQ(j["nodes"][0]["gpus"].size(), 8u);
}

TEST(DevicesCommand, NamedNvidiaWithoutDriverIsAOneLineError) {
  if (NvidiaPresent()) GTEST_SKIP() << "an NVIDIA driver is present";
  Result r = RunCli("devices --driver nvidia");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("libnvidia-ml.so.1"));
  EXPECT_EQ(r.out, "");
  // Also when the library path is overridden to something that does not exist.
  r = RunCli("devices --driver nvidia", "GPUPOOL_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
}

TEST(DevicesCommand, BadInputIsAOneLineErrorNeverACrash) {
  struct Case { const char* args; const char* why; };
  for (const Case& c : {Case{"devices --simulate 4xH100", "unknown GPU model 'H100'"},
                        Case{"devices --simulate 4H100-80GB", "no COUNTx prefix"},
                        Case{"devices --simulate x", "no COUNTx prefix"},
                        Case{"devices --simulate ,,", "empty item"},
                        Case{"devices --simulate 0xL4", "count below 1"},
                        Case{"devices --simulate 1xL4 --node-count 0", "node-count"},
                        Case{"devices --driver amd", "driver"},
                        Case{"devices --config /nonexistent.yaml", "cannot read config file"},
                        Case{"devices --driver nvidia --simulate 1xL4", "--simulate"},
                        Case{"nosuchcommand", "nosuchcommand"}}) {
    Result r = RunCli(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_LT(r.exit_code, 64) << c.args << " (crash or internal error): " << r.err;
    EXPECT_EQ(Lines(r.err), 1) << c.args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.why)) << c.args;
  }
}

TEST(MigPlanCommand, PlansAsJson) {
  Result r = RunCli("mig plan --model H100-80GB --profiles 3g.40gb,4g.40gb --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["model"], "H100-80GB");
  ASSERT_EQ(j["placements"].size(), 2u);
  EXPECT_EQ(j["placements"][0], json({{"profile", "3g.40gb"}, {"start", 4}, {"size", 4}}));
  EXPECT_EQ(j["placements"][1], json({{"profile", "4g.40gb"}, {"start", 0}, {"size", 4}}));
}

TEST(MigPlanCommand, MediaExtensionProfilesAndTable) {
  Result r = RunCli("mig plan --model a100-40gb --profiles 1g.5gb+me,2g.10gb");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1g.5gb+me"));
  EXPECT_THAT(r.out, HasSubstr("uses 3/8 memory slices and 3/7 compute slices"));
}

TEST(MigPlanCommand, ImpossibleLayoutExitsOneWithOneLine) {
  Result r = RunCli("mig plan --model H100-80GB --profiles 4g.40gb,4g.40gb");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("at most 1 4g.40gb instance"));
  r = RunCli("mig plan --model H100-80GB --profiles 7g.80gb,1g.10gb --json");
  EXPECT_EQ(r.exit_code, 1);
  json j = json::parse(r.out);
  EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("memory slices"));
  r = RunCli("mig plan --model H100 --profiles 1g.10gb");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown GPU model 'H100'"));
  r = RunCli("mig plan --model L4 --profiles 1g.10gb --json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(json::parse(r.out)["error"].get<std::string>(), HasSubstr("does not support MIG"));
  r = RunCli("mig plan --model H100-80GB --profiles 3g.20gb");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown MIG profile '3g.20gb'"));
}

TEST(VersionCommand, ReportsTransports) {
  Result r = RunCli("version --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_FALSE(j["ucx"]["version"].get<std::string>().empty());
  EXPECT_FALSE(j["nccl"].get<std::string>().empty());
}

}  // namespace

namespace {

// Files the tests wrote, removed once every test has run.
class TempFiles : public ::testing::Environment {
 public:
  static std::vector<std::filesystem::path>& Written() {
    static std::vector<std::filesystem::path> written;
    return written;
  }
  void TearDown() override {
    for (const auto& p : Written()) std::filesystem::remove(p);
  }
};
::testing::Environment* const kTempFiles = ::testing::AddGlobalTestEnvironment(new TempFiles);

std::string WriteTemp(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / absl::StrCat("gpupool_cli_", ::getpid(), "_", name);
  std::ofstream(path) << text;
  TempFiles::Written().push_back(path);
  return path.string();
}

// Runs the CLI with `args` and expects it to fail (with `exit_code` when one is given), naming
// `message` on stderr.
void ExpectRefused(const std::string& args, const std::string& message, int exit_code = -1) {
  Result r = RunCli(args);
  EXPECT_NE(r.exit_code, 0) << args;
  if (exit_code >= 0) EXPECT_EQ(r.exit_code, exit_code) << args;
  EXPECT_THAT(r.err, HasSubstr(message)) << args;
}

// A two-node trace (node list, pod list) small enough to replay in milliseconds.
std::pair<std::string, std::string> SmallTrace() {
  return {WriteTemp("nodes.csv",
                    "sn,cpu_milli,memory_mib,gpu,model\n"
                    "a,64000,262144,2,T4\nb,64000,262144,8,V100M16\n"),
          WriteTemp("pods.csv",
                    "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                    "p0,4000,8192,1,500\np1,8000,16384,2,1000\np2,2000,4096,1,250\n"
                    "p3,16000,32768,4,1000\np4,1000,1024,0,0\n")};
}

TEST(SimulateCommand, TraceProtocolAsJson) {
  const auto [nodes, pods] = SmallTrace();
  Result r = RunCli(absl::StrCat("simulate --nodes ", nodes, " --pods ", pods, " --seeds 1-3 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["policy"], "gpupool");
  EXPECT_EQ(j["seeds"], json({1, 2, 3}));
  ASSERT_EQ(j["allocated_pct"].size(), 131u);
  EXPECT_GT(j["allocated_pct_at_100"].get<double>(), 0);
  // A malformed line is named with file, line and column.
  std::string bad = WriteTemp("bad.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,x,1,500\n");
  r = RunCli(absl::StrCat("simulate --nodes ", nodes, " --pods ", bad));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(bad + ":2:"));
  ExpectRefused(absl::StrCat("simulate --nodes ", nodes, " --pods ", pods, " --policy nosuch"),
                "unknown policy 'nosuch'");
  ExpectRefused("simulate", "needs --nodes FILE and --pods FILE", 2);
}

TEST(SimulateCommand, ComparesPoliciesInTheTableAndOnAPage) {
  const auto [nodes, pods] = SmallTrace();
  const std::string html = WriteTemp("report.html", "");
  Result r = RunCli(absl::StrCat("simulate --nodes ", nodes, " --pods ", pods,
                                 " --seeds 1-2 --compare fgd,random --html ", html));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One row per policy in the table, the --policy first.
  const size_t own = r.out.find("\ngpupool "), fgd = r.out.find("\nfgd "), random = r.out.find("\nrandom ");
  ASSERT_NE(own, std::string::npos) << r.out;
  ASSERT_NE(fgd, std::string::npos) << r.out;
  ASSERT_NE(random, std::string::npos) << r.out;
  EXPECT_LT(own, fgd);
  EXPECT_LT(fgd, random);
  // The page: two charts with a curve per policy, and the table.
  const std::string page = Slurp(html);
  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  size_t charts = 0;
  for (size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) ++charts;
  EXPECT_EQ(charts, 2u);
  for (const char* policy : {"gpupool", "fgd", "random"}) {
    EXPECT_THAT(page, HasSubstr(absl::StrCat("<title>", policy, "</title>")));
    EXPECT_THAT(page, HasSubstr(absl::StrCat("<tr><td>", policy, "</td>")));
  }
  // Bad input is named; the options that only the protocol replay has are refused elsewhere.
  const std::string trace = absl::StrCat("simulate --nodes ", nodes, " --pods ", pods);
  ExpectRefused(trace + " --compare fgd,nosuch", "unknown policy 'nosuch'");
  ExpectRefused("simulate --workload teams --weeks 1 --compare fgd",
                "--compare applies to the trace protocol replay only", 2);
  ExpectRefused("simulate --timed --nodes " + nodes + " --pods " + pods + " --html /tmp/never.html",
                "--html applies to the trace protocol replay and --workload teams", 2);
  ExpectRefused(trace + " --html /no/such/dir/x.html", "cannot write /no/such/dir/x.html");
}

TEST(SimulateCommand, TeamsWorkloadDrawsUtilisationDayByDay) {
  const std::string html = WriteTemp("teams.html", "");
  Result r = RunCli(absl::StrCat("simulate --workload teams --weeks 1 --html ", html));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page = Slurp(html);
  EXPECT_THAT(page, HasSubstr("<title>dedicated</title>"));
  EXPECT_THAT(page, HasSubstr("<title>pooled</title>"));
  EXPECT_THAT(page, HasSubstr("<td>mean utilisation (busy GPU-hours / capacity)</td>"));
}

TEST(SimulateCommand, TeamsWorkloadComparesDedicatedAndPooled) {
  Result r = RunCli("simulate --workload teams --weeks 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_GT(j["pooled"]["mean_utilisation"].get<double>(), 0);
  EXPECT_GT(j["dedicated"]["mean_utilisation"].get<double>(), 0);
  EXPECT_EQ(j["pooled"]["teams"].size(), 4u);
  for (const char* mode : {"dedicated", "pooled"}) {
    EXPECT_LE(j[mode]["mean_utilisation"].get<double>(), j[mode]["held_utilisation"].get<double>()) << mode;
    EXPECT_LE(j[mode]["mean_utilisation"].get<double>(), j[mode]["offered_load"].get<double>()) << mode;
  }
  // The workload's shape is the user's to set: no sprints leaves only notebooks and inference.
  r = RunCli("simulate --workload teams --weeks 1 --sprint-probability 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(json::parse(r.out)["pooled"]["offered_load"].get<double>(), 0.1);
  r = RunCli("simulate --workload teams --sprint-probability 2");
  EXPECT_NE(r.exit_code, 0);
  std::string no_teams = WriteTemp("noteams.yaml", "nodes:\n  - gpus: [{model: L4}]\n");
  r = RunCli("simulate --workload teams --config " + no_teams);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("needs `nodes:` and `teams:`"));
}

}  // namespace

namespace {

// The README's main job: three teams share the embedded pool; every task completes and the table
// shows each team's GPU-hours. Run fast (7200x) and quiet to keep the test short.
TEST(DemoCommand, ThreeTeamsShareThePoolAndEveryTaskCompletes) {
  Result r = RunCli("demo --quiet --clock-speed 7200");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("training: 180 steps; experiments: 10 done ("), std::string::npos) << r.out;
  // Preempted experiments resume from their snapshots with exactly the weights of an uninterrupted run.
  EXPECT_NE(r.out.find("final weights identical to uninterrupted runs: 10 of 10); inference: 400 answered"),
            std::string::npos) << r.out;
  for (const char* team : {"vision", "nlp", "search"}) {
    EXPECT_NE(r.out.find(std::string("\n") + team + " "), std::string::npos) << team << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("UTILISATION"), std::string::npos);
  EXPECT_NE(r.out.find("LOST GPU-H"), std::string::npos);
}

// A shared pool's daemons as an operator runs them: `gpupool head` and two `gpupool agent`s as
// real background processes, `gpupool status`/`queue` against the head, and an agent killed
// with SIGKILL, whose node the head reports down within a few seconds.
class SharedPoolDaemons : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("gpupool_daemons_", ::getpid());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "tokens") << "# team: token\nvision: vision-token-0123456789\nagents: agent-token-0123456789\n";
    std::ofstream(dir_ / "agent.token") << "agent-token-0123456789\n";
    Background("head --simulate 2xH100-80GB --node-count 2 --tokens " + Path("tokens") +
                   " --listen 127.0.0.1:0 --port-file " + Path("port") + " --heartbeat-timeout-ms 1000",
               "head");
    for (int i = 0; i < 100 && port_.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      port_ = std::string(absl::StripAsciiWhitespace(Slurp(dir_ / "port")));
    }
    ASSERT_FALSE(port_.empty()) << "the head did not start: " << Slurp(dir_ / "head.log");
  }
  void TearDown() override {
    for (const std::string& name : started_) std::system(("kill -9 $(cat " + Path(name + ".pid") + ") 2>/dev/null").c_str());
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Background(const std::string& args, const std::string& name) {
    std::string command = absl::StrCat(GPUPOOL_CLI_PATH, " ", args, " >", Path(name + ".log"), " 2>&1 & echo $! >",
                                       Path(name + ".pid"));
    ASSERT_EQ(std::system(command.c_str()), 0);
    started_.push_back(name);
  }
  void Agent(const std::string& node) {
    Background("agent --head 127.0.0.1:" + port_ + " --node " + node + " --simulate 2xH100-80GB --heartbeat-ms 100 --token-file " +
                   Path("agent.token"),
               node);
  }
  // The head's view, polled until `ok` holds or 10 s pass.
  json WaitForStatus(const std::function<bool(const json&)>& ok) {
    json last;
    for (int i = 0; i < 100; ++i) {
      Result r = RunCli("status --json --pool 127.0.0.1:" + port_ + " --token vision-token-0123456789");
      if (r.exit_code == 0) {
        last = json::parse(r.out);
        if (ok(last)) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "status never reached the expected state; last: " << last.dump();
    return last;
  }
  static std::string AgentOf(const json& status, const std::string& node) {
    for (const json& n : status["nodes"]) {
      if (n["name"] == node) return n["agent"];
    }
    return "?";
  }
  std::filesystem::path dir_;
  std::string port_;
  std::vector<std::string> started_;
};

TEST_F(SharedPoolDaemons, AgentsRegisterAndAKilledAgentsNodeGoesDown) {
  Agent("node-0");
  Agent("node-1");
  json both = WaitForStatus([](const json& s) { return AgentOf(s, "node-0") == "up" && AgentOf(s, "node-1") == "up"; });
  EXPECT_EQ(both["capacity_gpus"], 4);

  Result table = RunCli("status --pool 127.0.0.1:" + port_ + " --token vision-token-0123456789");
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("NODE    AGENT  GPU  MODEL"));
  EXPECT_THAT(table.out, HasSubstr("2 nodes (2 up), 4 GPUs"));

  auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(std::system(("kill -9 $(cat " + Path("node-1.pid") + ")").c_str()), 0);
  json after = WaitForStatus([](const json& s) { return AgentOf(s, "node-1") == "down"; });
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(5));
  EXPECT_EQ(AgentOf(after, "node-0"), "up");
  for (const json& n : after["nodes"]) {
    if (n["name"] != "node-1") continue;
    for (const json& g : n["gpus"]) EXPECT_EQ(g["health"], "lost");
  }

  Result queue = RunCli("queue --pool 127.0.0.1:" + port_ + " --token vision-token-0123456789");
  EXPECT_EQ(queue.exit_code, 0) << queue.err;
  EXPECT_THAT(queue.out, HasSubstr("0 running, 0 pending"));
}

TEST_F(SharedPoolDaemons, BadTokensAndMismatchedNodesAreRefusedByName) {
  Result wrong = RunCli("status --pool 127.0.0.1:" + port_ + " --token not-a-token");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("describe needs the operators', a team's or the agents' token"));

  Result mismatch = RunCli("agent --head 127.0.0.1:" + port_ + " --node node-0 --simulate 4xH100-80GB --token-file " +
                           Path("agent.token"));
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_THAT(mismatch.err, HasSubstr("node 'node-0' reports 4 GPUs; the pool has 2"));

  Result unknown = RunCli("agent --head 127.0.0.1:" + port_ + " --node node-9 --simulate 2xH100-80GB --token-file " +
                          Path("agent.token"));
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("node 'node-9' is not in this pool's configuration"));

  std::ofstream(Path("short.tokens")) << "vision: short\n";
  Result short_token = RunCli("head --simulate 1xL4 --tokens " + Path("short.tokens"));
  EXPECT_EQ(short_token.exit_code, 1);
  EXPECT_THAT(short_token.err, HasSubstr("short.tokens:1: the token for 'vision' is shorter than 16 characters"));

  std::ofstream(Path("shared.tokens")) << "vision: same-token-0123456789\noperators: same-token-0123456789\n";
  Result shared = RunCli("head --simulate 1xL4 --tokens " + Path("shared.tokens"));
  EXPECT_EQ(shared.exit_code, 1);
  EXPECT_THAT(shared.err, HasSubstr("shared.tokens:2: 'operators' has the same token as 'vision'"));

  // Listening where other machines can connect needs the operator to say so (no TLS yet). The
  // refusal comes before anything binds, so this test listens nowhere but loopback.
  Result exposed = RunCli("head --simulate 1xL4 --tokens " + Path("tokens") + " --listen 0.0.0.0:0");
  EXPECT_EQ(exposed.exit_code, 1);
  EXPECT_THAT(exposed.err, HasSubstr("listens on loopback unless told it may use the network; got '0.0.0.0'"));
  EXPECT_THAT(exposed.err, HasSubstr("--insecure-network"));

  // The reclaim window is the operator's (tests shorten it); a negative one is refused up front.
  Result negative = RunCli("head --simulate 1xL4 --tokens " + Path("tokens") + " --reclaim-window-s -1");
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_THAT(negative.err, HasSubstr("--reclaim-window-s must be between 0 and a year of seconds, not -1"));
  EXPECT_THAT(RunCli("agent --help").out, HasSubstr("--allow-root-workers"));
  // The placement policy is the operator's choice among the scheduler's; an unknown one is named.
  Result policy = RunCli("head --simulate 1xL4 --tokens " + Path("tokens") + " --placement-policy tetris");
  EXPECT_EQ(policy.exit_code, 1);
  EXPECT_THAT(policy.err, HasSubstr("unknown placement policy 'tetris'"));
  EXPECT_THAT(policy.err, HasSubstr("packing"));
}

// `usage` refuses what it cannot answer before asking the head, naming the flag.
TEST_F(SharedPoolDaemons, UsageNamesTheFlagItCannotRead) {
  const std::string head = "usage --pool 127.0.0.1:" + port_ + " --token vision-token-0123456789";
  Result unbounded = RunCli(head + " --cost");
  EXPECT_EQ(unbounded.exit_code, 1);
  EXPECT_THAT(unbounded.err, HasSubstr("--cost needs a bounded period (--since"));
  Result since = RunCli(head + " --since yesterday");
  EXPECT_EQ(since.exit_code, 1);
  EXPECT_THAT(since.err, HasSubstr("--since: cannot read 'yesterday' as a time"));
  Result backwards = RunCli(head + " --since 2025-01-02 --until 2025-01-01T00:00:00Z");
  EXPECT_EQ(backwards.exit_code, 1);
  EXPECT_THAT(backwards.err, HasSubstr("the period is empty: it starts at 1735776000 and ends at 1735689600"));
  Result format = RunCli(head + " --since -7d --format xml");
  EXPECT_EQ(format.exit_code, 1);
  EXPECT_THAT(format.err, HasSubstr("--format must be table, json or csv, not 'xml'"));
  Result no_journal = RunCli(head + " --since -7d --cost --format csv");
  EXPECT_EQ(no_journal.exit_code, 1);
  EXPECT_THAT(no_journal.err, HasSubstr("this head keeps no journal"));
}

// Chargeback and savings from a head with a journal, as an operator types them: CSV whose cents
// add up to the capacity's, and the savings table written as HTML too.
TEST_F(SharedPoolDaemons, UsageCostAndSavingsFromAJournal) {
  std::ofstream(Path("ops.tokens")) << "vision: vision-token-0123456789\noperators: ops-token-0123456789\n";
  Background("head --simulate 2xH100-80GB --tokens " + Path("ops.tokens") + " --listen 127.0.0.1:0 --port-file " +
                 Path("jport") + " --journal " + Path("head.db"),
             "jhead");
  std::string port;
  for (int i = 0; i < 100 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    port = std::string(absl::StripAsciiWhitespace(Slurp(dir_ / "jport")));
  }
  ASSERT_FALSE(port.empty());
  const std::string head = " --pool 127.0.0.1:" + port + " --token ops-token-0123456789";
  Result csv = RunCli("usage" + head + " --since -1h --cost --format csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_THAT(csv.out, HasSubstr("team,gpu-hours,leases,busy-hours,efficiency,cost-usd\n"));
  // 2 GPUs for an hour at the catalogue's H100 price; no agent registered, so all of it is
  // unavailable (the GPUs are lost until their agent comes) or idle (before the head started).
  double sum = 0;
  std::istringstream lines(csv.out);
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) sum += std::stod(line.substr(line.rfind(',') + 1));
  Result json_usage = RunCli("usage" + head + " --since -1h --cost --json");
  ASSERT_EQ(json_usage.exit_code, 0) << json_usage.err;
  json u = json::parse(json_usage.out);
  EXPECT_NEAR(sum, u["capacity"]["cost_cents"].get<int64_t>() / 100.0, 1e-9);
  EXPECT_GT(u["unavailable"]["gpu_hours"].get<double>(), 0) << "the GPUs without an agent are unavailable";

  Result savings = RunCli("savings" + head + " --since -1d --html " + Path("savings.html"));
  ASSERT_EQ(savings.exit_code, 0) << savings.err;
  EXPECT_THAT(savings.out, HasSubstr("FLEET"));
  EXPECT_THAT(savings.out, HasSubstr("pooling saved"));
  EXPECT_THAT(Slurp(dir_ / "savings.html"), HasSubstr("<table>"));
  Result bad = RunCli("savings" + head + " --since tomorrow");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("--since: cannot read 'tomorrow' as a time"));
}

}  // namespace
