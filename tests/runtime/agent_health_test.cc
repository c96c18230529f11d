// The agent's health pieces on their own: --inject parsing and application, which GPUs are due a
// diagnostic, the simulated diagnostic, and the operators' health-check program (real processes).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pool/devices/pool_spec.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/agent/diagnostics.h"
#include "runtime/agent/fault_plan.h"
#include "runtime/agent/health_check.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using HS = pool::HealthState;

TEST(FaultPlan, ParsesEveryKind) {
  auto f = ParseFaultInjection("1:silent-corruption@2.5");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->gpu, 1);
  EXPECT_EQ(f->kind, FaultKind::kSilentCorruption);
  EXPECT_EQ(f->at_s, 2.5);
  f = ParseFaultInjection("0:xid-79@0");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, FaultKind::kXid);
  EXPECT_EQ(f->xid, 79);
  for (const char* k : {"ecc-dbe", "ecc-sbe", "off-bus", "repaired"}) {
    EXPECT_TRUE(ParseFaultInjection(std::string("3:") + k + "@1").ok()) << k;
  }
}

TEST(FaultPlan, MalformedSpecsNameWhatIsWrong) {
  EXPECT_THAT(ParseFaultInjection("1:melted@2").status().message(), HasSubstr("unknown kind 'melted'"));
  EXPECT_THAT(ParseFaultInjection("x:xid-13@2").status().message(), HasSubstr("'x' is not a GPU index"));
  EXPECT_THAT(ParseFaultInjection("1:xid-13@soon").status().message(), HasSubstr("'soon' is not a number"));
  EXPECT_THAT(ParseFaultInjection("1:xid-13").status().message(), HasSubstr("GPU:KIND@SECONDS"));
  EXPECT_THAT(ParseFaultInjection("1:xid-0@1").status().message(), HasSubstr("unknown kind 'xid-0'"));
  EXPECT_THAT(ParseFaultInjection("-1:ecc-dbe@1").status().message(), HasSubstr("not a GPU index"));
}

TEST(FaultPlan, SilentCorruptionFailsTheSimulatedDiagnosticUntilRepaired) {
  auto driver = pool::SimulatedDriver::Create(pool::ParseSimulationSpec("2xH100-80GB").value()).value();
  const std::string node = driver->Discover().value()[0].name;
  SimulatedDiagnostic diag(*driver, node);
  const std::atomic<bool> go{false};
  EXPECT_TRUE(diag.Run(1, go).ok());
  ASSERT_TRUE(ApplyFault(*driver, node, ParseFaultInjection("1:silent-corruption@0").value()).ok());
  absl::Status st = diag.Run(1, go);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_TRUE(diag.Run(0, go).ok()) << "the other GPU is fine";
  ASSERT_TRUE(ApplyFault(*driver, node, ParseFaultInjection("1:repaired@0").value()).ok());
  EXPECT_TRUE(diag.Run(1, go).ok());
  EXPECT_EQ(ApplyFault(*driver, node, ParseFaultInjection("9:ecc-dbe@0").value()).code(), absl::StatusCode::kNotFound);
}

TEST(FaultPlan, ASimulatedDiagnosticTakesItsTimeAndStopsWhenTold) {
  auto driver = pool::SimulatedDriver::Create(pool::ParseSimulationSpec("1xH100-80GB").value()).value();
  const std::string node = driver->Discover().value()[0].name;
  SimulatedDiagnostic diag(*driver, node, /*seconds=*/30);
  RunningDiagnostic running;
  running.Started("_pool/diagnostic/n/0#1");
  running.Interrupt("_pool/diagnostic/n/0#0", "an older lease");  // not the running test's: ignored
  EXPECT_FALSE(running.stop().load());
  std::thread head([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    running.Interrupt("_pool/diagnostic/n/0#1", "work was placed on GPU n/0");
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = diag.Run(0, running.stop());
  head.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "it did not stop when told";
  EXPECT_EQ(running.Ended(), "work was placed on GPU n/0");
  running.Started("_pool/diagnostic/n/0#2");
  EXPECT_FALSE(running.stop().load()) << "a new test starts unstopped";
  EXPECT_EQ(running.Ended(), "");
  // The head's word can arrive between a lease's grant and its test's start: it starts stopped.
  running.Interrupt("_pool/diagnostic/n/0#3", "work was placed on GPU n/0");
  running.Started("_pool/diagnostic/n/0#3");
  EXPECT_TRUE(running.stop().load());
  EXPECT_EQ(diag.Run(0, running.stop()).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(running.Ended(), "work was placed on GPU n/0");
}

TEST(DiagnosticPlan, IdleGpusAreTestedEveryPeriodLeasedOnesNever) {
  DiagnosticPlan plan({.every_s = 10, .quarantine_retry_s = 1, .max_backoff_s = 10});
  std::vector<DiagnosticPlan::GpuView> view = {{0, HS::kHealthy, false}, {1, HS::kHealthy, true}};
  EXPECT_TRUE(plan.Due(view, 0).empty());  // idle from now
  EXPECT_TRUE(plan.Due(view, 9).empty());
  EXPECT_EQ(plan.Due(view, 10), std::vector<int>{0});
  plan.Ran(0, true, 10);
  EXPECT_TRUE(plan.Due(view, 15).empty());
  EXPECT_EQ(plan.Due(view, 20), std::vector<int>{0});
  view[0].leased = true;  // a lease came: not tested, and idle time starts again after it
  EXPECT_TRUE(plan.Due(view, 30).empty());
  view[0].leased = false;
  EXPECT_TRUE(plan.Due(view, 31).empty());
  EXPECT_EQ(plan.Due(view, 41), std::vector<int>{0});
}

TEST(DiagnosticPlan, QuarantinedGpusAreRetriedWithABackoffThatDoubles) {
  DiagnosticPlan plan({.every_s = 0, .quarantine_retry_s = 1, .max_backoff_s = 4});
  std::vector<DiagnosticPlan::GpuView> view = {{0, HS::kQuarantined, false}, {1, HS::kFailed, false},
                                               {2, HS::kDraining, false}};
  EXPECT_EQ(plan.Due(view, 0), std::vector<int>{0});  // at once; failed and draining GPUs never
  plan.Ran(0, false, 0);
  EXPECT_TRUE(plan.Due(view, 1.5).empty());  // 2 s after one failure
  EXPECT_EQ(plan.Due(view, 2), std::vector<int>{0});
  plan.Ran(0, false, 2);
  EXPECT_TRUE(plan.Due(view, 5.9).empty());  // 4 s after two
  plan.Ran(0, false, 6);
  EXPECT_EQ(plan.Due(view, 10), std::vector<int>{0}) << "capped at max_backoff_s";
  plan.Ran(0, true, 10);
  EXPECT_EQ(plan.Due(view, 11), std::vector<int>{0}) << "a pass resets the backoff";
}

class HealthCheckTest : public ::testing::Test {
 protected:
  std::string Script(const std::string& body) {
    std::string path = (std::filesystem::temp_directory_path() / ("gpupool-check-" + std::to_string(getpid()) + "-" +
                                                                  std::to_string(n_++) + ".sh")).string();
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
  int n_ = 0;
};

TEST_F(HealthCheckTest, PassFailTimeoutAndMissing) {
  auto ok = RunHealthCheck(Script("echo fine"), std::chrono::seconds(5));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->passed());
  auto bad = RunHealthCheck(Script("echo 'PSU 2 fault' >&2; exit 3"), std::chrono::seconds(5));
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->passed());
  EXPECT_EQ(bad->exit_code, 3);
  EXPECT_EQ(bad->output, "PSU 2 fault");
  auto silent = RunHealthCheck(Script("exit 1"), std::chrono::seconds(5));
  ASSERT_TRUE(silent.ok());
  EXPECT_EQ(silent->output, "exit status 1");
  const auto start = std::chrono::steady_clock::now();
  auto hung = RunHealthCheck(Script("echo checking; exec sleep 30"), std::chrono::milliseconds(300));
  ASSERT_TRUE(hung.ok());
  EXPECT_TRUE(hung->timed_out);
  EXPECT_FALSE(hung->passed());
  EXPECT_THAT(hung->output, HasSubstr("timed out after 0.3 s: checking"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  auto missing = RunHealthCheck("/nonexistent/check.sh", std::chrono::seconds(1));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/check.sh"));
}

}  // namespace
}  // namespace gpupool::runtime
