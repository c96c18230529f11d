#include "pool/health.h"
#include "pool/health_machine.h"

#include <gtest/gtest.h>

namespace gpupool::pool {
namespace {

GpuHealthReading Clean() {
  GpuHealthReading r;
  r.ecc_correctable = 0;
  r.ecc_uncorrectable = 0;
  r.temperature_c = 40;
  return r;
}

TEST(Health, CleanReadingIsHealthy) {
  HealthVerdict v = AssessHealth(Clean());
  EXPECT_EQ(v.state, HealthState::kHealthy);
  EXPECT_TRUE(v.reasons.empty());
}

TEST(Health, ApplicationXidsDoNotMarkTheGpu) {
  for (int xid : {13, 31, 43, 45, 68, 109}) {
    GpuHealthReading r = Clean();
    r.xids = {xid};
    EXPECT_EQ(AssessHealth(r).state, HealthState::kHealthy) << xid;
  }
}

TEST(Health, HardwareXidsDrainAndXid79IsLost) {
  for (int xid : {48, 63, 64, 92, 94, 95}) {
    GpuHealthReading r = Clean();
    r.xids = {xid};
    EXPECT_EQ(AssessHealth(r).state, HealthState::kDraining) << xid;
  }
  GpuHealthReading r = Clean();
  r.xids = {79};
  HealthVerdict v = AssessHealth(r);
  EXPECT_EQ(v.state, HealthState::kLost);
  EXPECT_EQ(v.reasons.front(), "XID 79 (fell off the bus)");
}

TEST(Health, TheDriversRecoveryActionDrains) {
  GpuHealthReading r = Clean();
  r.recovery_action = 0;
  EXPECT_EQ(AssessHealth(r).state, HealthState::kHealthy);
  r.recovery_action = 1;
  HealthVerdict v = AssessHealth(r);
  EXPECT_EQ(v.state, HealthState::kDraining);
  EXPECT_EQ(v.reasons.front(), "the driver asks for a GPU reset");
  r.recovery_action = 9;  // a newer driver's action: still not "none"
  EXPECT_EQ(AssessHealth(r).reasons.front(), "the driver asks for recovery action 9");
}

TEST(Health, EccRemapAndThrottle) {
  GpuHealthReading r = Clean();
  r.ecc_correctable = 3;
  EXPECT_EQ(AssessHealth(r).state, HealthState::kDegraded);
  r.remap_pending = true;
  EXPECT_EQ(AssessHealth(r).state, HealthState::kDraining);
  GpuHealthReading hot = Clean();
  hot.throttle_reasons = kThrottleHwThermal | kThrottleGpuIdle;
  HealthVerdict v = AssessHealth(hot);
  EXPECT_EQ(v.state, HealthState::kDegraded);
  EXPECT_EQ(v.reasons.front(), "throttled: hw_thermal");
  GpuHealthReading idle = Clean();
  idle.throttle_reasons = kThrottleGpuIdle;  // idle clocks are not a problem
  EXPECT_EQ(AssessHealth(idle).state, HealthState::kHealthy);
}

// Issue 24 changed what "until repaired" means: a clean reading still does not return a drained
// GPU (a driver's AssessHealth keeps it drained, and so does the head's state machine), but
// passing its diagnostics does, and only a GPU that failed them needs an operator's `repaired`.
TEST(Health, DrainedStaysDrainedUntilRepaired) {
  EXPECT_EQ(AssessHealth(Clean(), HealthState::kDraining).state, HealthState::kDraining);
  EXPECT_EQ(AssessHealth(Clean(), HealthState::kDegraded).state, HealthState::kHealthy);
  GpuHealthMachine m({.passes_to_return = 2, .failures_to_fail = 2});
  m.OnVerdict(AssessHealth([] { GpuHealthReading r = Clean(); r.xids = {48}; return r; }()), 1);
  m.OnLeasesGone(2);
  m.OnVerdict(AssessHealth(Clean()), 3);  // the XID is gone from the next reading
  EXPECT_EQ(m.state(), HealthState::kQuarantined);
  m.OnDiagnostic(true, "", 4);
  m.OnDiagnostic(true, "", 5);
  EXPECT_EQ(m.state(), HealthState::kHealthy);  // diagnosed back, no operator needed
  m.OnDiagnostic(false, "pattern mismatch", 6);
  m.OnLeasesGone(7);
  m.OnDiagnostic(false, "pattern mismatch", 8);
  EXPECT_EQ(m.state(), HealthState::kFailed);
  m.OnDiagnostic(true, "", 9);
  m.OnDiagnostic(true, "", 10);
  EXPECT_EQ(m.state(), HealthState::kFailed);  // a failed GPU waits for the operator
  ASSERT_TRUE(m.OnOperator(OperatorAction::kRepaired, "ops", "", 11).ok());
  EXPECT_EQ(m.state(), HealthState::kQuarantined);
}

}  // namespace
}  // namespace gpupool::pool
