// The pool service's health (runtime/service/pool_service_health.cc) on an embedded pool of
// simulated GPUs: what the state machine's transitions do to leases and to what is scheduled, and
// that every one reaches the observer (the head's journal) with who and why.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/service/pool_service.h"
#include "runtime/sync/mutex.h"
#include "tests/runtime/lease_recorder.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using HS = pool::HealthState;

class PoolHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PoolServiceOptions o;
    o.pool.simulate = "2xH100-80GB";
    o.health_interval = std::chrono::milliseconds(50);
    o.health_policy = {.passes_to_return = 2, .failures_to_fail = 2};
    auto started = PoolService::Start(o);
    ASSERT_TRUE(started.ok()) << started.status();
    pool_ = *std::move(started);
    node_ = pool_->inventory().gpus()[0].ref.node;
    pool_->SetHealthObserver([this](const pool::GpuRef& gpu, const pool::HealthTransition& t,
                                    const pool::GpuHealthMachine&) {
      MutexLock lock(&mu_);
      log_.push_back(absl::StrCat(gpu.node, "/", gpu.index, " ", pool::HealthStateName(t.from), "->",
                                  pool::HealthStateName(t.to), " by ", t.actor, ": ", t.reason));
    });
  }
  std::vector<std::string> Log() {
    MutexLock lock(&mu_);
    return log_;
  }
  pool::GpuRef Gpu(int i) const { return {node_, i}; }
  pool::LeaseRequest Req(const std::string& id) {
    pool::LeaseRequest r;
    r.id = id;
    r.team = "default";
    return r;
  }

  Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  Recorder a_, b_, c_;  // outlive the pool
  std::unique_ptr<PoolService> pool_;
  std::string node_;
};

TEST_F(PoolHealthTest, ADrainedGpuIsQuarantinedOnceItsLeaseIsGoneAndGetsNoNewLease) {
  ASSERT_TRUE(pool_->Request(Req("a"), &a_).ok());
  ASSERT_TRUE(a_.WaitFor("granted"));
  const pool::GpuRef held = a_.last_lease().gpus[0];
  auto lines = pool_->Operate(held.node, held.index, pool::OperatorAction::kDrain, "alice", "fan noise");
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(pool_->health(held), HS::kDraining) << "its lease is still there";
  ASSERT_TRUE(a_.WaitFor("revoked"));
  ASSERT_TRUE(pool_->Release(a_.last_lease().id).ok());
  for (int i = 0; i < 100 && pool_->health(held) != HS::kQuarantined; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(pool_->health(held), HS::kQuarantined);
  // Two more requests: one fits the other GPU, the second waits (the quarantined GPU is not used).
  ASSERT_TRUE(pool_->Request(Req("b"), &b_).ok());
  ASSERT_TRUE(pool_->Request(Req("c"), &c_).ok());
  ASSERT_TRUE(b_.WaitFor("granted"));
  EXPECT_NE(b_.last_lease().gpus[0].index, held.index);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(c_.events().empty()) << c_.events().front();
  std::optional<GpuHealthDetails> d = pool_->HealthDetails(held);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->drained_by, "alice");
  EXPECT_EQ(d->drain_reason, "fan noise");
  EXPECT_THAT(Log(), ::testing::ElementsAre(
                         absl::StrCat(held.node, "/", held.index, " healthy->draining by alice: drained by alice: fan noise"),
                         absl::StrCat(held.node, "/", held.index, " draining->quarantined by pool: its leases are gone")));
  // Resumed: the waiting request gets it.
  ASSERT_TRUE(pool_->Operate(held.node, held.index, pool::OperatorAction::kResume, "bob", "").ok());
  ASSERT_TRUE(c_.WaitFor("granted"));
}

TEST_F(PoolHealthTest, FailedDiagnosticsQuarantineThenFailAndOnlyRepairedHelps) {
  ASSERT_TRUE(pool_->ReportDiagnostic(Gpu(1), false, "7 words altered").ok());
  EXPECT_EQ(pool_->health(Gpu(1)), HS::kQuarantined);  // no lease: straight through draining
  ASSERT_TRUE(pool_->ReportDiagnostic(Gpu(1), false, "7 words altered").ok());
  EXPECT_EQ(pool_->health(Gpu(1)), HS::kFailed);
  auto resume = pool_->Operate(node_, 1, pool::OperatorAction::kResume, "alice", "");
  EXPECT_EQ(resume.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resume.status().message(), HasSubstr(absl::StrCat(node_, "/1: the GPU is failed")));
  ASSERT_TRUE(pool_->Operate(node_, 1, pool::OperatorAction::kRepaired, "alice", "new board").ok());
  EXPECT_EQ(pool_->health(Gpu(1)), HS::kQuarantined);
  ASSERT_TRUE(pool_->ReportDiagnostic(Gpu(1), true, "").ok());
  ASSERT_TRUE(pool_->ReportDiagnostic(Gpu(1), true, "").ok());
  EXPECT_EQ(pool_->health(Gpu(1)), HS::kHealthy);
  std::optional<GpuHealthDetails> d = pool_->HealthDetails(Gpu(1));
  EXPECT_EQ(d->last_diagnostic, pool::DiagnosticResult::kPassed);
  EXPECT_EQ(Log().size(), 5u);  // draining, quarantined, failed, quarantined (repaired), healthy
}

TEST_F(PoolHealthTest, ADriversCriticalReadingDrainsAndAnApplicationXidDoesNot) {
  auto* sim = dynamic_cast<pool::SimulatedDriver*>(pool_->driver());
  ASSERT_NE(sim, nullptr);
  ASSERT_TRUE(sim->InjectXid(Gpu(0), 13).ok());
  ASSERT_TRUE(sim->InjectEccError(Gpu(1), pool::EccErrorKind::kDoubleBit).ok());
  pool_->PollHealthNow();
  EXPECT_EQ(pool_->health(Gpu(0)), HS::kHealthy);
  EXPECT_EQ(pool_->health(Gpu(1)), HS::kQuarantined);
  EXPECT_THAT(pool_->HealthDetails(Gpu(1))->reasons, ::testing::Contains(HasSubstr("uncorrectable ECC")));
}

TEST_F(PoolHealthTest, UnknownNodesAndGpusAreNamed) {
  EXPECT_THAT(pool_->Operate("node-9", std::nullopt, pool::OperatorAction::kDrain, "a", "x").status().message(),
              HasSubstr("node 'node-9' is not in this pool"));
  EXPECT_THAT(pool_->Operate(node_, 5, pool::OperatorAction::kDrain, "a", "x").status().message(),
              HasSubstr("has no GPU 5"));
  EXPECT_EQ(pool_->ReportDiagnostic({node_, 5}, false, "").code(), absl::StatusCode::kNotFound);
  // A whole node: every GPU, one line each.
  auto lines = pool_->Operate(node_, std::nullopt, pool::OperatorAction::kDrain, "a", "rack work");
  ASSERT_TRUE(lines.ok());
  EXPECT_EQ(lines->size(), 2u);
}

// Diagnostics' leases (runtime/service/diagnostic_holds.h).
TEST_F(PoolHealthTest, ADiagnosticHoldsALeaseOfThePoolsOwnThatAnyWorkEndsAtOnce) {
  absl::StatusOr<pool::Lease> diag = pool_->BeginDiagnostic(Gpu(1), &a_);
  ASSERT_TRUE(diag.ok()) << diag.status();
  EXPECT_EQ(diag->request.team, "_pool");
  EXPECT_EQ(diag->request.workload_class, "diagnostics");
  // Shown like any lease, on its GPU.
  std::vector<pool::Lease> leases = pool_->Leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].id, diag->id);
  EXPECT_EQ(leases[0].gpus, std::vector<pool::GpuRef>{Gpu(1)});
  // One test per GPU; a GPU the pool lacks is named.
  EXPECT_THAT(pool_->BeginDiagnostic(Gpu(1), &b_).status().message(), HasSubstr("a diagnostic holds GPU"));
  EXPECT_EQ(pool_->BeginDiagnostic({node_, 7}, &b_).status().code(), absl::StatusCode::kNotFound);
  // Work placed elsewhere leaves the test alone, and work placed on its GPU ends it at once: no
  // grace period, whatever its class or its team's quota, and the test's holder hears so. (The
  // scheduler does not steer around tests, so which of two requests ends it is its choice.)
  ASSERT_TRUE(pool_->Request(Req("w1"), &b_).ok());
  ASSERT_TRUE(b_.WaitFor("granted"));
  if (b_.last_lease().gpus[0] == Gpu(0)) {
    EXPECT_TRUE(a_.events().empty()) << a_.events().front();
    ASSERT_TRUE(pool_->Request(Req("w2"), &c_).ok());
    ASSERT_TRUE(c_.WaitFor("granted"));
    EXPECT_EQ(c_.last_lease().gpus[0], Gpu(1));
  }
  ASSERT_TRUE(a_.WaitFor("lost"));
  EXPECT_THAT(a_.events().front(), HasSubstr(absl::StrCat("work was placed on GPU ", node_, "/1")));
  // Its outcome is dropped: a failure seen while sharing the GPU proves nothing.
  absl::Status end = pool_->EndDiagnostic(diag->id, false, "7 words altered");
  EXPECT_EQ(end.code(), absl::StatusCode::kAborted) << end;
  EXPECT_EQ(pool_->health(Gpu(1)), HS::kHealthy);
  EXPECT_TRUE(Log().empty());
  // A leased GPU is refused, naming why; the pool's own team is charged for the test's time.
  EXPECT_THAT(pool_->BeginDiagnostic(Gpu(1), &a_).status().message(), HasSubstr("is leased or reserved for work"));
  EXPECT_EQ(pool_->Ledger().at("_pool").leases, 1u);
}

TEST_F(PoolHealthTest, AQuarantinedGpusDiagnosticEndsWithItsOutcomeAppliedAndADrainingOneIsRefused) {
  ASSERT_TRUE(pool_->Request(Req("a"), &a_).ok());
  ASSERT_TRUE(a_.WaitFor("granted"));
  const pool::GpuRef held = a_.last_lease().gpus[0];
  // A failed diagnostic (reported without a lease, as an older agent does) drains it.
  ASSERT_TRUE(pool_->ReportDiagnostic(held, false, "7 words altered").ok());
  EXPECT_THAT(pool_->BeginDiagnostic(held, &b_).status().message(), HasSubstr("is draining"));
  ASSERT_TRUE(pool_->Release(a_.last_lease().id).ok());
  for (int i = 0; i < 100 && pool_->health(held) != HS::kQuarantined; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(pool_->health(held), HS::kQuarantined);
  // Two passes in a row (the policy's passes_to_return) bring it back, each under its own lease.
  for (int pass = 0; pass < 2; ++pass) {
    absl::StatusOr<pool::Lease> diag = pool_->BeginDiagnostic(held, &b_);
    ASSERT_TRUE(diag.ok()) << diag.status();
    ASSERT_TRUE(pool_->EndDiagnostic(diag->id, true, "memory pattern test passed").ok());
    EXPECT_EQ(pool_->EndDiagnostic(diag->id, true, "").code(), absl::StatusCode::kAborted) << "ended twice";
  }
  EXPECT_EQ(pool_->health(held), HS::kHealthy);
  // One not concluded (nullopt: its agent went away) applies nothing.
  absl::StatusOr<pool::Lease> diag = pool_->BeginDiagnostic(held, &b_);
  ASSERT_TRUE(diag.ok()) << diag.status();
  ASSERT_TRUE(pool_->EndDiagnostic(diag->id, std::nullopt, "").ok());
  EXPECT_EQ(pool_->HealthDetails(held)->last_diagnostic, pool::DiagnosticResult::kPassed);
  EXPECT_TRUE(b_.events().empty()) << b_.events().front();
  EXPECT_EQ(pool_->Ledger().at("_pool").leases, 3u);
  EXPECT_TRUE(pool_->Leases().empty());
}

TEST_F(PoolHealthTest, ADiagnosticOnAGpuThatStartsToDrainIsInterrupted) {
  absl::StatusOr<pool::Lease> diag = pool_->BeginDiagnostic(Gpu(1), &a_);
  ASSERT_TRUE(diag.ok()) << diag.status();
  ASSERT_TRUE(pool_->ReportHealth(Gpu(1), HS::kDraining, {"XID 79: off the bus"}).ok());
  ASSERT_TRUE(a_.WaitFor("lost"));
  EXPECT_THAT(a_.events().front(), HasSubstr("is draining"));
  EXPECT_EQ(pool_->EndDiagnostic(diag->id, true, "").code(), absl::StatusCode::kAborted);
  EXPECT_NE(pool_->health(Gpu(1)), HS::kHealthy) << "a passing test that was interrupted does not return it";
}

}  // namespace
}  // namespace gpupool::runtime
