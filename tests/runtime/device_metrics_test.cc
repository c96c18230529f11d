// The agents' device metrics under dcgm-exporter's names: the rendering over a simulated driver
// (busy, hot, lost and XID-hit GPUs), and a real `gpupool agent --http-listen` process scraped over
// loopback, its figures checked against the same spec's `gpupool devices --json`, with garbage
// thrown at its port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "pool/devices/pool_spec.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/agent/device_metrics.h"
#include "tests/runtime/http_client.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Every sample of the text format as "NAME{labels}" -> value, and the families' TYPE lines.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
};

Scrape Parse(const std::string& text) {
  Scrape s;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      s.types[name] = type;
    } else if (!line.empty() && line[0] != '#') {
      size_t space = line.rfind(' ');
      s.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
  }
  return s;
}

std::string Key(const std::string& family, int gpu, const std::string& uuid, const std::string& bus,
                const std::string& model, const std::string& host) {
  return absl::StrCat(family, "{gpu=\"", gpu, "\",UUID=\"", uuid, "\",pci_bus_id=\"", bus, "\",device=\"nvidia", gpu,
                      "\",modelName=\"", model, "\",Hostname=\"", host, "\"}");
}

const char* const kFamilies[] = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"};

class DeviceMetricsRender : public ::testing::Test {
 protected:
  void SetUp() override {
    auto driver = pool::SimulatedDriver::Create(pool::ParseSimulationSpec("3xA100-80GB").value());
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
    gpus_ = driver_->Discover().value()[0].gpus;
  }
  Scrape Render() {
    return Parse(RenderDeviceMetrics(
        DeviceMetricsSource{.driver = driver_.get(), .driver_node = "node-0", .gpus = gpus_, .hostname = "rack-7"}));
  }
  std::string K(const char* family, int i) {
    const pool::DiscoveredGpu& g = gpus_[i];
    return Key(family, i, g.uuid, g.pci_bus_id, g.name, "rack-7");
  }
  std::unique_ptr<pool::SimulatedDriver> driver_;
  std::vector<pool::DiscoveredGpu> gpus_;
};

TEST_F(DeviceMetricsRender, BusyHotAndXidHitGpusReportTheirFiguresUnderDcgmNames) {
  ASSERT_TRUE(driver_->SetActivity({"node-0", 0}, 87, 30000, 312.5).ok());
  ASSERT_TRUE(driver_->SetThermalState({"node-0", 0}, 0, 71).ok());
  ASSERT_TRUE(driver_->InjectXid({"node-0", 1}, 13).ok());
  ASSERT_TRUE(driver_->InjectXid({"node-0", 1}, 31).ok());
  // Health reads hand the XIDs out; the telemetry's last XID must outlive them.
  ASSERT_TRUE(driver_->ReadHealth({"node-0", 1}).ok());
  Scrape s = Render();
  for (const char* f : kFamilies) EXPECT_EQ(s.types[f], "gauge") << f;
  const int64_t total = gpus_[0].memory_mib;
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_GPU_UTIL", 0)], 87);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_FB_USED", 0)], 30000);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_FB_FREE", 0)], total - 30000);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_GPU_TEMP", 0)], 71);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_POWER_USAGE", 0)], 312.5);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_XID_ERRORS", 0)], 0);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_XID_ERRORS", 1)], 31);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_GPU_UTIL", 2)], 0);
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_FB_FREE", 2)], total);
  EXPECT_EQ(s.samples.size(), 6u * 3u);
}

TEST_F(DeviceMetricsRender, ALostGpuReportsOnlyItsLastXid) {
  ASSERT_TRUE(driver_->FallOffBus({"node-0", 2}).ok());
  Scrape s = Render();
  EXPECT_EQ(s.samples[K("DCGM_FI_DEV_XID_ERRORS", 2)], 79);
  for (const char* f : kFamilies) {
    if (std::string(f) != "DCGM_FI_DEV_XID_ERRORS") {
      EXPECT_EQ(s.samples.count(K(f, 2)), 0u) << f;
    }
  }
  EXPECT_EQ(s.samples.size(), 6u * 2u + 1u);
  // A repaired GPU is back, its XID cleared with the reset.
  ASSERT_TRUE(driver_->Repair({"node-0", 2}).ok());
  EXPECT_EQ(Render().samples[K("DCGM_FI_DEV_XID_ERRORS", 2)], 0);
}

TEST_F(DeviceMetricsRender, ImpossibleActivityIsRefusedByName) {
  absl::Status st = driver_->SetActivity({"node-0", 0}, 101, 0, 10);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(std::string(st.message()), HasSubstr("utilisation must be 0..100 %"));
  EXPECT_TRUE(absl::IsInvalidArgument(driver_->SetActivity({"node-0", 0}, 5, gpus_[0].memory_mib + 1, 10)));
  EXPECT_TRUE(absl::IsNotFound(driver_->SetActivity({"node-0", 9}, 5, 0, 10)));
}

// A label value the driver hands over (a device name) cannot break the format.
TEST_F(DeviceMetricsRender, LabelValuesAreEscaped) {
  std::vector<pool::DiscoveredGpu> odd = {gpus_[0]};
  odd[0].name = "Evil\"GPU\n} 1";
  std::string text = RenderDeviceMetrics(
      DeviceMetricsSource{.driver = driver_.get(), .driver_node = "node-0", .gpus = odd, .hostname = "h"});
  EXPECT_THAT(text, HasSubstr("modelName=\"Evil\\\"GPU\\n} 1\""));
  EXPECT_THAT(text, Not(HasSubstr("Evil\"GPU\n")));
}

// ---- A real agent process. ----

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AgentProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("gpupool_devmetrics_", ::getpid());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "tokens") << "vision: vision-token-0123456789\nagents: agent-token-0123456789\n";
    std::ofstream(dir_ / "agent.token") << "agent-token-0123456789\n";
  }
  void TearDown() override {
    for (const std::string& name : started_) {
      std::system(("kill -9 $(cat " + Path(name + ".pid") + ") 2>/dev/null").c_str());
    }
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Background(const std::string& args, const std::string& name) {
    std::string command = absl::StrCat(GPUPOOL_CLI_PATH, " ", args, " >", Path(name + ".log"), " 2>&1 & echo $! >",
                                       Path(name + ".pid"));
    ASSERT_EQ(std::system(command.c_str()), 0);
    started_.push_back(name);
  }
  // The number in `file` once its writer has written it (10 s at most); 0 when it never does.
  uint16_t WaitForPort(const std::string& file) {
    for (int i = 0; i < 200; ++i) {
      std::string text(absl::StripAsciiWhitespace(Slurp(dir_ / file)));
      if (!text.empty()) return static_cast<uint16_t>(std::stoi(text));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }
  bool Alive(const std::string& name) {
    return std::system(("kill -0 $(cat " + Path(name + ".pid") + ") 2>/dev/null").c_str()) == 0;
  }
  int RunCli(const std::string& args, std::string* out) {
    std::string command = absl::StrCat(GPUPOOL_CLI_PATH, " ", args, " >", Path("cli.out"), " 2>&1");
    int status = std::system(command.c_str());
    *out = Slurp(dir_ / "cli.out");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::filesystem::path dir_;
  std::vector<std::string> started_;
};

TEST_F(AgentProcess, ServesItsNodesGpusUnderDcgmNamesAndSurvivesGarbage) {
  Background("head --simulate 2xH100-80GB --node-count 1 --tokens " + Path("tokens") +
                 " --listen 127.0.0.1:0 --port-file " + Path("head.port"),
             "head");
  uint16_t head = WaitForPort("head.port");
  ASSERT_NE(head, 0) << Slurp(dir_ / "head.log");
  Background(absl::StrCat("agent --head 127.0.0.1:", head, " --node node-0 --simulate 2xH100-80GB --token-file ",
                          Path("agent.token"), " --http-listen 127.0.0.1:0 --http-port-file ", Path("agent.port")),
             "agent");
  uint16_t port = WaitForPort("agent.port");
  ASSERT_NE(port, 0) << Slurp(dir_ / "agent.log");

  // What the same simulated spec is, as `gpupool devices` reports it.
  std::string devices_out;
  ASSERT_EQ(RunCli("devices --simulate 2xH100-80GB --json", &devices_out), 0) << devices_out;
  nlohmann::json devices = nlohmann::json::parse(devices_out);
  const nlohmann::json& gpus = devices["nodes"][0]["gpus"];
  ASSERT_EQ(gpus.size(), 2u) << devices_out;

  HttpReply reply = Get(port, "/metrics");
  ASSERT_EQ(reply.status, 200) << reply.head;
  EXPECT_THAT(reply.head, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  Scrape s = Parse(reply.body);
  for (const char* f : kFamilies) EXPECT_EQ(s.types[f], "gauge") << f;
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& g = gpus[i];
    auto k = [&](const char* f) {
      return Key(f, i, g["uuid"].get<std::string>(), g["pci_bus_id"].get<std::string>(), g["name"].get<std::string>(),
                 "node-0");
    };
    ASSERT_EQ(s.samples.count(k("DCGM_FI_DEV_GPU_UTIL")), 1u) << reply.body;
    EXPECT_EQ(s.samples[k("DCGM_FI_DEV_GPU_UTIL")], 0);
    EXPECT_EQ(s.samples[k("DCGM_FI_DEV_FB_USED")], 0);
    EXPECT_EQ(s.samples[k("DCGM_FI_DEV_FB_FREE")], g["memory_mib"].get<double>());
    EXPECT_EQ(s.samples[k("DCGM_FI_DEV_GPU_TEMP")], 40);
    EXPECT_GT(s.samples[k("DCGM_FI_DEV_POWER_USAGE")], 0);
    EXPECT_EQ(s.samples[k("DCGM_FI_DEV_XID_ERRORS")], 0);
  }
  EXPECT_EQ(s.samples.size(), 12u) << reply.body;

  // Nothing but /metrics, which holds no secret: the rest is 404 with no figures.
  HttpReply other = Get(port, "/api/v1/status");
  EXPECT_EQ(other.status, 404);
  EXPECT_THAT(other.body, Not(HasSubstr("DCGM_")));

  // Garbage: binary noise, a head past the limit, a POST, a request cut off mid-line, a flood of
  // connections that never speak. Each gets an error or a close, and the agent lives on.
  EXPECT_EQ(SendRaw(port, std::string("\x00\xff\x13garbage\r\n\r\n", 15)).status, 400);
  EXPECT_EQ(SendRaw(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(64 * 1024, 'a') + "\r\n\r\n").status, 431);
  EXPECT_EQ(SendRaw(port, "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").status, 405);
  (void)SendRaw(port, "GET /metr");
  std::vector<int> silent;
  for (int i = 0; i < 80; ++i) silent.push_back(ConnectLoopback(port));
  for (int fd : silent) {
    if (fd >= 0) close(fd);
  }
  EXPECT_TRUE(Alive("agent")) << Slurp(dir_ / "agent.log");
  // The flood's connections count against the server's limit until its poll loop sees them
  // closed, so a scrape right after may be refused with 503 (correctly); it must serve again soon.
  HttpReply again = Get(port, "/metrics");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       again.status == 503 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    again = Get(port, "/metrics");
  }
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Parse(again.body).samples.size(), 12u);
}

TEST_F(AgentProcess, ANetworkAddressNeedsInsecureNetworkAndABadOneIsNamed) {
  std::string out;
  // No head is needed to refuse the flag: the endpoint starts before the agent reaches one.
  EXPECT_EQ(RunCli("agent --head 127.0.0.1:1 --node n --simulate 1xL4 --token agent-token-0123456789"
                   " --http-listen 0.0.0.0:0",
                   &out),
            1);
  EXPECT_THAT(out, HasSubstr("--insecure-network"));
  EXPECT_EQ(RunCli("agent --head 127.0.0.1:1 --node n --simulate 1xL4 --token agent-token-0123456789"
                   " --http-listen nowhere",
                   &out),
            1);
  EXPECT_THAT(out, HasSubstr("--http-listen: 'nowhere' is not HOST:PORT"));
}

}  // namespace
}  // namespace gpupool::runtime
