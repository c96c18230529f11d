// The head's HTTP endpoint over real loopback sockets (runtime/service/head_http.h): tokens and
// what they see, /metrics in the Prometheus text format as a scraper parses it, the dashboard's
// page without data, and garbage on the port, which never crashes or stalls the head.
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/client/head_report.h"
#include "runtime/client/remote_pool.h"
#include "tests/runtime/http_client.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/test_head.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

constexpr char kTeams[] = R"(
model_groups:
  gpus: [H100-80GB]
priority_classes:
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
teams:
  - name: vision
    quotas: [{gpus: gpus, nominal: 1}]
  - name: nlp
    quotas: [{gpus: gpus, nominal: 1, borrowing_limit: 1}]
)";
constexpr char kOps[] = "ops-token-0123456789";
constexpr char kVision[] = "vision-token-0123456789";
constexpr char kNlp[] = "nlp-token-0123456789";

// One sample of the text format: name, labels, value. A line that is not a comment and does not
// parse is a test failure.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> ParseExposition(const std::string& text) {
  // name{label="value",...} number ; label values may hold escaped \\ \" \n
  static const std::regex line_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
  static const std::regex label_re(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?)re");
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  std::set<std::string> typed;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) {
      ADD_FAILURE() << "not a sample: " << line;
      continue;
    }
    Sample s{.name = m[1], .value = std::stod(m[4])};
    std::string labels = m[3];
    for (std::sregex_iterator it(labels.begin(), labels.end(), label_re), end; it != end; ++it) {
      s.labels[(*it)[1]] = (*it)[2];
    }
    std::string family = std::regex_replace(s.name, std::regex("_(bucket|sum|count)$"), "");
    EXPECT_TRUE(typed.contains(s.name) || typed.contains(family)) << "no # TYPE before " << s.name;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Sample> Named(const std::vector<Sample>& all, const std::string& name) {
  std::vector<Sample> out;
  for (const Sample& s : all) {
    if (s.name == name) out.push_back(s);
  }
  return out;
}

class HeadHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    journal_ = ::testing::TempDir() + "/head-http-" + std::to_string(::getpid()) + ".db";
    std::remove(journal_.c_str());
    PoolServiceOptions po;
    po.pool.simulate = "2xH100-80GB";
    po.config_text = kTeams;
    PoolServerOptions so;
    so.team_tokens = {{"vision", kVision}, {"nlp", kNlp}};
    so.operator_token = kOps;
    so.journal_path = journal_;
    so.http = true;
    so.history_interval = std::chrono::milliseconds(100);  // a minute, in the real head
    head_ = StartHead(po, so);
    ASSERT_NE(head_, nullptr);
    port_ = head_->http_port();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    jobs_.clear();
    head_.reset();
    std::remove(journal_.c_str());
  }
  PoolClient* Join(const std::string& team, const std::string& token) {
    auto c = RemotePool::Connect({.port = head_->port(), .team = team, .token = token});
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    jobs_.push_back(*std::move(c));
    return jobs_.back().get();
  }
  // vision holds one GPU, nlp one; nlp's second request waits.
  void FillThePool() {
    PoolClient* vision = Join("vision", kVision);
    PoolClient* nlp = Join("nlp", kNlp);
    ASSERT_TRUE(vision && nlp);
    pool::LeaseRequest v = Req("vjob/train");
    v.project = "detector \"v2\"\nbeta";  // a client-chosen label value that needs escaping
    ASSERT_TRUE(vision->Request(v, &heard_[0]).ok());
    ASSERT_TRUE(heard_[0].WaitFor("granted"));
    ASSERT_TRUE(nlp->Request(Req("njob/train"), &heard_[1]).ok());
    ASSERT_TRUE(heard_[1].WaitFor("granted"));
    ASSERT_TRUE(nlp->Request(Req("njob/more"), &heard_[2]).ok());
    for (int i = 0; i < 500 && head_->pool().pending_requests() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::string journal_;
  std::unique_ptr<PoolServer> head_;
  uint16_t port_ = 0;
  Recorder heard_[3];  // outlive the jobs
  std::vector<std::unique_ptr<PoolClient>> jobs_;
};

TEST_F(HeadHttp, MetricsAndTheApiAnswer401WithNoDataWithoutAKnownToken) {
  FillThePool();
  for (const std::string& path : {"/metrics", "/api/v1/status", "/api/v1/queue", "/api/v1/usage"}) {
    for (const std::string& token : {std::string(), std::string("nobodys-token-0123456789")}) {
      HttpReply r = Get(port_, path, token);
      EXPECT_EQ(r.status, 401) << path;
      EXPECT_THAT(r.head, HasSubstr("WWW-Authenticate: Bearer"));
      EXPECT_EQ(r.body.find("gpupool_"), std::string::npos) << path;
      EXPECT_EQ(r.body.find("vision"), std::string::npos) << path;
      EXPECT_EQ(r.body.find("node-0"), std::string::npos) << path;
    }
  }
  // "Basic" is not "Bearer".
  EXPECT_EQ(SendRaw(port_, std::string("GET /metrics HTTP/1.1\r\nAuthorization: Basic ") + kOps + "\r\n\r\n").status, 401);
}

TEST_F(HeadHttp, TheDashboardPageNeedsNoTokenAndHoldsNoData) {
  FillThePool();
  HttpReply page = Get(port_, "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_THAT(page.head, HasSubstr("Content-Type: text/html"));
  EXPECT_THAT(page.body, HasSubstr("sessionStorage"));
  EXPECT_EQ(page.body.find("node-0"), std::string::npos);
  EXPECT_EQ(page.body.find("vision"), std::string::npos);
  EXPECT_EQ(page.body.find("src=\"http"), std::string::npos) << "no external scripts";
  EXPECT_EQ(page.body.find("href=\"http"), std::string::npos) << "no external styles or fonts";
  EXPECT_EQ(Get(port_, "/nothing-here").status, 404);
}

TEST_F(HeadHttp, TheOperatorsScrapeHasEveryFamilyInTheTextFormat) {
  FillThePool();
  HttpReply r = Get(port_, "/metrics", kOps);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.head, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  std::vector<Sample> all = ParseExposition(r.body);
  for (const char* family :
       {"gpupool_node_up", "gpupool_gpu_health", "gpupool_gpu_allocated_ratio", "gpupool_gpu_lease_info",
        "gpupool_team_allocated_gpus", "gpupool_team_nominal_quota_gpus", "gpupool_team_borrowed_gpus",
        "gpupool_pending_requests", "gpupool_admission_wait_seconds_count", "gpupool_gpu_seconds_total",
        "gpupool_scheduler_cycle_duration_seconds_bucket", "gpupool_work_lost_gpu_seconds_total"}) {
    EXPECT_FALSE(Named(all, family).empty()) << family << "\n" << r.body;
  }
  ASSERT_EQ(Named(all, "gpupool_node_up").size(), 1u);
  EXPECT_EQ(Named(all, "gpupool_node_up")[0].value, 1);
  // gpu_health: one state at 1 per GPU, the others 0.
  std::map<std::string, double> healthy_sum;
  for (const Sample& s : Named(all, "gpupool_gpu_health")) healthy_sum[s.labels.at("gpu")] += s.value;
  EXPECT_EQ(healthy_sum, (std::map<std::string, double>{{"0", 1}, {"1", 1}}));
  std::set<std::string> lease_teams;
  for (const Sample& s : Named(all, "gpupool_gpu_lease_info")) lease_teams.insert(s.labels.at("team"));
  EXPECT_EQ(lease_teams, (std::set<std::string>{"nlp", "vision"}));
  std::vector<Sample> pending = Named(all, "gpupool_pending_requests");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].labels.at("team"), "nlp");
  EXPECT_EQ(pending[0].labels.at("priority_class"), "training");
  EXPECT_FALSE(pending[0].labels.at("reason").empty());
  for (const Sample& s : Named(all, "gpupool_team_nominal_quota_gpus")) EXPECT_EQ(s.value, 1) << s.labels.at("team");
  // The project label came back escaped, and parses back to what the client sent.
  bool found = false;
  for (const Sample& s : Named(all, "gpupool_gpu_seconds_total")) {
    found |= s.labels.at("project") == "detector \\\"v2\\\"\\nbeta";
  }
  EXPECT_TRUE(found) << r.body;
  // The histogram's buckets are cumulative and end at +Inf with the count.
  std::vector<Sample> buckets = Named(all, "gpupool_scheduler_cycle_duration_seconds_bucket");
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_GE(buckets[i].value, buckets[i - 1].value);
  EXPECT_EQ(buckets.back().labels.at("le"), "+Inf");
  EXPECT_EQ(buckets.back().value, Named(all, "gpupool_scheduler_cycle_duration_seconds_count")[0].value);
}

TEST_F(HeadHttp, ATeamsScrapeHasThePoolsFamiliesAndItsOwnRowsOnly) {
  FillThePool();
  HttpReply r = Get(port_, "/metrics", kVision);
  ASSERT_EQ(r.status, 200);
  std::vector<Sample> all = ParseExposition(r.body);
  // 2 GPUs x 6 states (healthy, degraded, draining, quarantined, failed, lost).
  EXPECT_EQ(Named(all, "gpupool_gpu_health").size(), 12u) << "every GPU's health is pool-wide";
  for (const Sample& s : all) {
    if (s.labels.contains("team")) EXPECT_EQ(s.labels.at("team"), "vision") << s.name;
  }
  EXPECT_EQ(r.body.find("njob"), std::string::npos);
  EXPECT_TRUE(Named(all, "gpupool_pending_requests").empty()) << "nlp's waiting request is not vision's";

  json queue = json::parse(Get(port_, "/api/v1/queue", kVision).body);
  EXPECT_EQ(queue["leases"].size(), 1u);
  EXPECT_EQ(queue["totals"]["pending"], 1);
  json usage = json::parse(Get(port_, "/api/v1/usage?by=project", kVision).body);
  EXPECT_EQ(usage["viewer"], "vision");
  ASSERT_EQ(usage["rows"].size(), 1u);
  EXPECT_EQ(usage["rows"][0]["group"], "detector \"v2\"\nbeta");
  HttpReply bad = Get(port_, "/api/v1/usage?by=colour", kVision);
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("cannot group usage by 'colour'"));
  EXPECT_EQ(Get(port_, "/api/v1/usage?since=yesterday", kVision).status, 400);
}

// usage --by job: each lease's job as its request ids name it ("<job>/<rest>", under the head's
// "s<N>/" prefix); a team sees its own jobs only. (The ledger's side, after a release, is
// head_journal_test's AVersion2JournalGainsJobIdsInPlace.)
TEST_F(HeadHttp, UsageByJobNamesEachLeasesJob) {
  FillThePool();
  json all = json::parse(Get(port_, "/api/v1/usage?by=job&since=0", kOps).body);
  EXPECT_EQ(all["by"], "job");
  ASSERT_EQ(all["rows"].size(), 2u) << all.dump();
  EXPECT_EQ(all["rows"][0]["group"], "njob");
  EXPECT_EQ(all["rows"][0]["leases"], 1);
  EXPECT_EQ(all["rows"][1]["group"], "vjob");
  json mine = json::parse(Get(port_, "/api/v1/usage?by=job&since=0", kVision).body);
  ASSERT_EQ(mine["rows"].size(), 1u) << mine.dump();
  EXPECT_EQ(mine["rows"][0]["group"], "vjob");
}

// The history the head samples into its journal, read back over HTTP: the pool's row and the
// viewer's own team's only.
TEST_F(HeadHttp, HistoryIsSampledIntoTheJournalAndFilteredByViewer) {
  FillThePool();
  json rows;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rows = json::parse(Get(port_, "/api/v1/history", kOps).body)["rows"];
    bool full = false;
    for (const json& r : rows) full |= r["scope"] == "pool" && r["allocated_gpus"].get<double>() == 2;
    if (full) break;
  }
  std::set<std::string> scopes;
  double pool_capacity = 0, model_allocated = -1, model_capacity = -1;
  for (const json& r : rows) {
    scopes.insert(r["scope"].get<std::string>());
    if (r["scope"] == "pool") pool_capacity = r["capacity_gpus"].get<double>();
    if (r["scope"] == "model:H100-80GB") {  // the newest sample, which the loop waited for
      model_allocated = r["allocated_gpus"].get<double>();
      model_capacity = r["capacity_gpus"].get<double>();
    }
  }
  EXPECT_EQ(scopes, (std::set<std::string>{"model:H100-80GB", "nlp", "pool", "vision"})) << rows.dump();
  EXPECT_EQ(pool_capacity, 2);
  EXPECT_EQ(model_allocated, 2) << "the one model's row follows the pool's";
  EXPECT_EQ(model_capacity, 2);
  std::set<std::string> vision_sees;
  HttpReply mine = Get(port_, "/api/v1/history", kVision);
  ASSERT_EQ(mine.status, 200) << mine.body;
  const json mine_json = json::parse(mine.body);  // iterated below: it must outlive the loop
  for (const json& r : mine_json["rows"]) {
    vision_sees.insert(r["scope"].get<std::string>());
  }
  EXPECT_EQ(vision_sees, (std::set<std::string>{"model:H100-80GB", "pool", "vision"}))
      << "the per-model rows are pool-wide, as the pool's";
}

// Garbage of every kind on the HTTP port: the head keeps answering both its HTTP and its RPC port,
// and a well-formed request made while idle connections sit open is still answered at once.
TEST_F(HeadHttp, GarbageOnThePortNeverCrashesOrStallsTheHead) {
  FillThePool();
  std::mt19937 random(23);
  std::vector<std::string> cases = {
      "", "\r\n\r\n", "GET\r\n\r\n", "GET /metrics HTTP/9.9\r\n\r\n", "POST /metrics HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET /%zz?a=%g HTTP/1.1\r\n\r\n", "GET /api/v1/usage?since=%ff%00 HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nbad header\r\n\r\n", "GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n", std::string(100000, 'A'),
      "GET /metrics" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1\r\n" + std::string(70, 'X') + " Y:1\r\n\r\n",
      std::string("\0\0\0\x16\x03\x01", 6)};
  std::string many_headers = "GET /metrics HTTP/1.1\r\n";
  for (int i = 0; i < 100; ++i) many_headers += "H" + std::to_string(i) + ": v\r\n";
  cases.push_back(many_headers + "\r\n");
  for (int i = 0; i < 200; ++i) {
    std::string junk(random() % 3000, '\0');
    for (char& c : junk) c = static_cast<char>(random());
    if (i % 2 == 0) junk = "GET /metrics HTTP/1.1\r\n" + junk;
    cases.push_back(junk);
  }
  for (const std::string& c : cases) {
    HttpReply r = SendRaw(port_, c);
    if (r.status != 0) EXPECT_TRUE(r.status == 400 || r.status >= 401) << r.status;
    if (r.status == 200) ADD_FAILURE() << "garbage was answered with data: " << c.substr(0, 60);
  }
  EXPECT_EQ(SendRaw(port_, std::string(100000, 'A')).status, 431);
  EXPECT_EQ(SendRaw(port_, "POST /metrics HTTP/1.1\r\n\r\n").status, 405);

  // Idle connections that never finish their request (slowloris) do not hold up others.
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) {
    int fd = ConnectLoopback(port_);
    ASSERT_GE(fd, 0);
    (void)!send(fd, "GET /metr", 9, MSG_NOSIGNAL);
    idle.push_back(fd);
  }
  auto start = std::chrono::steady_clock::now();
  HttpReply ok = Get(port_, "/metrics", kOps);
  EXPECT_EQ(ok.status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  for (int fd : idle) close(fd);

  absl::StatusOr<std::string> rpc = FetchHeadReport("127.0.0.1", head_->port(), kOps);
  ASSERT_TRUE(rpc.ok()) << rpc.status();
  EXPECT_EQ(json::parse(*rpc)["totals"]["leases"], 2);
}

TEST(HeadHttpOptions, ANetworkAddressNeedsTheOperatorsConsent) {
  PoolServiceOptions po;
  po.pool.simulate = "1xL4";
  auto pool = PoolService::Start(po);
  ASSERT_TRUE(pool.ok());
  PoolServerOptions so;
  so.http = true;
  so.http_address = "0.0.0.0";
  auto server = PoolServer::Start(*std::move(pool), so);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("HTTP endpoint listens on loopback unless told"));
}

}  // namespace
}  // namespace gpupool::runtime
