#include "pool/health_machine.h"

#include <gtest/gtest.h>

namespace gpupool::pool {
namespace {

HealthVerdict Clean() { return {}; }
HealthVerdict Drain(const std::string& why) { return {HealthState::kDraining, {why}}; }

// Takes a fresh machine out of service by a failed diagnostic and empties it.
GpuHealthMachine Quarantined(HealthPolicy policy) {
  GpuHealthMachine m(policy);
  m.OnDiagnostic(false, "12 words altered", 1);
  m.OnLeasesGone(2);
  return m;
}

TEST(HealthMachine, ReadingsMoveAGpuInServiceBetweenHealthyAndDegraded) {
  GpuHealthMachine m;
  auto t = m.OnVerdict({HealthState::kDegraded, {"3 correctable ECC errors"}}, 10);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kDegraded);
  EXPECT_EQ(m.reasons(), std::vector<std::string>{"3 correctable ECC errors"});
  EXPECT_EQ(m.since_s(), 10);
  t = m.OnVerdict(Clean(), 11);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kHealthy);
  EXPECT_TRUE(m.reasons().empty());
  EXPECT_FALSE(m.OnVerdict(Clean(), 12).has_value());  // no change, no transition
}

TEST(HealthMachine, ACriticalReadingDrainsAndTheEmptyGpuIsQuarantined) {
  GpuHealthMachine m;
  auto t = m.OnVerdict(Drain("XID 48"), 5);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->from, HealthState::kHealthy);
  EXPECT_EQ(t->to, HealthState::kDraining);
  EXPECT_EQ(t->reason, "XID 48");
  EXPECT_EQ(t->actor, "agent");
  t = m.OnLeasesGone(7);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kQuarantined);
  EXPECT_EQ(m.reasons(), std::vector<std::string>{"XID 48"});  // why it was drained stays
  EXPECT_FALSE(m.OnLeasesGone(8).has_value());
}

TEST(HealthMachine, QuarantinedReturnsAfterPassingInARowOnlyWithCleanReadings) {
  GpuHealthMachine m = Quarantined({.passes_to_return = 2, .failures_to_fail = 5});
  EXPECT_FALSE(m.OnDiagnostic(true, "", 3).has_value());
  EXPECT_FALSE(m.OnDiagnostic(false, "1 word altered", 4).has_value());  // resets the run of passes
  EXPECT_FALSE(m.OnDiagnostic(true, "", 5).has_value());
  auto t = m.OnDiagnostic(true, "", 6);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kHealthy);
  EXPECT_EQ(t->reason, "passed 2 diagnostics in a row");
  EXPECT_EQ(m.last_diagnostic(), DiagnosticResult::kPassed);
  EXPECT_EQ(*m.last_diagnostic_s(), 6);

  // A pending row remap still read: passing diagnostics is not enough.
  GpuHealthMachine r;
  r.OnVerdict(Drain("row remap pending"), 1);
  r.OnLeasesGone(2);
  r.OnDiagnostic(true, "", 3);
  EXPECT_FALSE(r.OnDiagnostic(true, "", 4).has_value());
  EXPECT_EQ(r.state(), HealthState::kQuarantined);
  auto back = r.OnVerdict(Clean(), 5);  // the reset cleared it
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->to, HealthState::kHealthy);
}

TEST(HealthMachine, KeepsFailingThenFailedUntilRepaired) {
  GpuHealthMachine m = Quarantined({.passes_to_return = 1, .failures_to_fail = 3});
  EXPECT_FALSE(m.OnDiagnostic(false, "a", 3).has_value());  // 2 failures since it left service
  auto t = m.OnDiagnostic(false, "b", 4);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kFailed);
  EXPECT_EQ(m.reasons().front(), "failed 3 diagnostics; last: b");
  // Passing now changes nothing, and neither do clean readings or a resume.
  EXPECT_FALSE(m.OnDiagnostic(true, "", 5).has_value());
  EXPECT_FALSE(m.OnVerdict(Clean(), 6).has_value());
  auto resume = m.OnOperator(OperatorAction::kResume, "alice", "", 7);
  EXPECT_EQ(resume.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(resume.status().message().find("gpupool gpu repaired"), std::string::npos);
  EXPECT_EQ(m.state(), HealthState::kFailed);
  // Repaired: quarantined with a clean slate, back after passing.
  auto repaired = m.OnOperator(OperatorAction::kRepaired, "alice", "new board", 8);
  ASSERT_TRUE(repaired.ok());
  ASSERT_TRUE(repaired->has_value());
  EXPECT_EQ((*repaired)->to, HealthState::kQuarantined);
  EXPECT_EQ((*repaired)->actor, "alice");
  EXPECT_EQ(m.failures(), 0);
  auto back = m.OnDiagnostic(true, "", 9);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->to, HealthState::kHealthy);
}

TEST(HealthMachine, AnOperatorsDrainHoldsUntilResumed) {
  GpuHealthMachine m({.passes_to_return = 1, .failures_to_fail = 3});
  EXPECT_EQ(m.OnOperator(OperatorAction::kDrain, "alice", "", 1).status().code(), absl::StatusCode::kInvalidArgument);
  auto t = m.OnOperator(OperatorAction::kDrain, "alice", "fan noise", 1);
  ASSERT_TRUE(t.ok() && t->has_value());
  EXPECT_EQ((*t)->to, HealthState::kDraining);
  EXPECT_EQ(m.drained_by(), "alice");
  EXPECT_EQ(m.drain_reason(), "fan noise");
  m.OnLeasesGone(2);
  EXPECT_FALSE(m.OnDiagnostic(true, "", 3).has_value());  // passing does not undo an operator's drain
  EXPECT_EQ(m.state(), HealthState::kQuarantined);
  auto resumed = m.OnOperator(OperatorAction::kResume, "bob", "", 4);
  ASSERT_TRUE(resumed.ok() && resumed->has_value());
  EXPECT_EQ((*resumed)->to, HealthState::kHealthy);
  EXPECT_EQ((*resumed)->actor, "bob");
  EXPECT_TRUE(m.drained_by().empty());
}

TEST(HealthMachine, LostUntilReachableThenQuarantined) {
  GpuHealthMachine m;
  auto t = m.OnVerdict({HealthState::kLost, {"XID 79 (fell off the bus)"}}, 1);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kLost);
  EXPECT_EQ(m.OnOperator(OperatorAction::kResume, "alice", "", 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  t = m.OnVerdict(Clean(), 3);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, HealthState::kQuarantined);
}

TEST(HealthMachine, NamesRoundTrip) {
  for (OperatorAction a : {OperatorAction::kDrain, OperatorAction::kResume, OperatorAction::kRepaired}) {
    EXPECT_EQ(ParseOperatorAction(OperatorActionName(a)), a);
  }
  EXPECT_FALSE(ParseOperatorAction("undrain").has_value());
  for (HealthState s : {HealthState::kHealthy, HealthState::kDegraded, HealthState::kDraining,
                        HealthState::kQuarantined, HealthState::kFailed, HealthState::kLost}) {
    HealthState parsed = HealthState::kLost;
    ASSERT_TRUE(ParseHealthStateName(HealthStateName(s), &parsed));
    EXPECT_EQ(parsed, s);
  }
  HealthState unused;
  EXPECT_FALSE(ParseHealthStateName("drained", &unused));
}

}  // namespace
}  // namespace gpupool::pool
