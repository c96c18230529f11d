#include "absl/strings/string_view.h"
#include "pool/mig_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

// "3g.40gb@4 1g.10gb@6" for compact expectations, in request order.
absl::StatusOr<std::string> Plan(absl::string_view model, absl::string_view profiles,
                                 absl::string_view existing = "") {
  MigLayout layout(*FindGpuModel(model));
  if (!existing.empty()) {
    for (absl::string_view item : absl::StrSplit(existing, ' ')) {
      std::vector<std::string> parts = absl::StrSplit(item, '@');
      int start = std::stoi(parts[1]);
      absl::Status s = layout.Add(*layout.model().FindMigProfile(parts[0]), start);
      if (!s.ok()) return s;
    }
  }
  std::vector<std::string> names = absl::StrSplit(profiles, ',');
  absl::StatusOr<std::vector<MigPlacement>> plan = PlanMigLayout(layout, names);
  if (!plan.ok()) return plan.status();
  return absl::StrJoin(*plan, " ", [](std::string* out, const MigPlacement& p) {
    absl::StrAppend(out, p.profile->name, "@", p.start);
  });
}

// The rule: keep the largest further profile placeable, ties to the lowest start.
TEST(MigPlanner, SingleProfileKeepsLargestFurtherProfilePlaceable) {
  // 3g at 4 leaves 4g placeable at 0; 3g at 0 would leave only another 3g.
  EXPECT_EQ(*Plan("H100-80GB", "3g.40gb"), "3g.40gb@4");
  // 2g at 4 leaves slices 0-3 for a 4g; at 0 or 2 only a 3g would still fit.
  EXPECT_EQ(*Plan("H100-80GB", "2g.20gb"), "2g.20gb@4");
  // 1g at 4, 5 or 6 all keep 4g placeable: lowest wins.
  EXPECT_EQ(*Plan("H100-80GB", "1g.10gb"), "1g.10gb@4");
  EXPECT_EQ(*Plan("H100-80GB", "7g.80gb"), "7g.80gb@0");
}

TEST(MigPlanner, ResultIsInRequestOrderWhilePlacingLargestFirst) {
  EXPECT_EQ(*Plan("A100-40GB", "1g.5gb,3g.20gb,2g.10gb"), "1g.5gb@2 3g.20gb@4 2g.10gb@0");
  EXPECT_EQ(*Plan("H100-80GB", "4g.40gb,3g.40gb"), "4g.40gb@0 3g.40gb@4");
}

struct LayoutCase {
  const char* model;
  const char* profiles;
};

class MixedLayoutsThatFit : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(MixedLayoutsThatFit, PlansAValidLayout) {
  const LayoutCase& c = GetParam();
  absl::StatusOr<std::string> plan = Plan(c.model, c.profiles);
  ASSERT_TRUE(plan.ok()) << c.model << " " << c.profiles << ": " << plan.status();
  // Re-adding the chosen placements to a fresh layout must succeed: the plan obeys the rules.
  MigLayout check(*FindGpuModel(c.model));
  for (absl::string_view item : absl::StrSplit(*plan, ' ')) {
    std::vector<std::string> parts = absl::StrSplit(item, '@');
    EXPECT_TRUE(check.Add(*check.model().FindMigProfile(parts[0]), std::stoi(parts[1])).ok()) << item;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Nvidia, MixedLayoutsThatFit,
    ::testing::Values(LayoutCase{"A100-40GB", "4g.20gb,3g.20gb"},
                      LayoutCase{"A100-40GB", "3g.20gb,3g.20gb"},
                      LayoutCase{"A100-40GB", "2g.10gb,2g.10gb,3g.20gb"},
                      LayoutCase{"A100-40GB", "2g.10gb,2g.10gb,2g.10gb,1g.5gb"},
                      LayoutCase{"A100-40GB", "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb"},
                      LayoutCase{"A100-40GB", "1g.10gb,1g.10gb,1g.10gb,1g.10gb"},
                      LayoutCase{"A100-40GB", "1g.5gb+me,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb"},
                      LayoutCase{"H100-80GB", "4g.40gb,2g.20gb,1g.10gb"},
                      LayoutCase{"H100-80GB", "3g.40gb,2g.20gb,1g.10gb,1g.10gb"},
                      LayoutCase{"H100-80GB", "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.20gb"},
                      LayoutCase{"H100-80GB", "3g.40gb,1g.20gb,1g.20gb"},
                      LayoutCase{"H200-141GB", "3g.71gb,2g.35gb,2g.35gb"},
                      LayoutCase{"H200-141GB", "4g.71gb,1g.35gb,1g.35gb"},
                      LayoutCase{"A30-24GB", "2g.12gb,1g.6gb,1g.6gb"}));

struct FailCase {
  const char* model;
  const char* profiles;
  const char* existing;
  const char* why;  // a substring the error must contain
};

class MixedLayoutsThatFail : public ::testing::TestWithParam<FailCase> {};

TEST_P(MixedLayoutsThatFail, AreRefusedNamingTheConflict) {
  const FailCase& c = GetParam();
  absl::StatusOr<std::string> plan = Plan(c.model, c.profiles, c.existing);
  ASSERT_FALSE(plan.ok()) << c.profiles << " fitted as " << *plan;
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(c.why));
}

INSTANTIATE_TEST_SUITE_P(
    Nvidia, MixedLayoutsThatFail,
    ::testing::Values(
        FailCase{"A100-40GB", "4g.20gb,4g.20gb", "", "at most 1 4g.20gb instance"},
        FailCase{"H100-80GB", "3g.40gb,3g.40gb,3g.40gb", "", "at most 2 3g.40gb instances"},
        FailCase{"H100-80GB", "7g.80gb,1g.10gb", "", "need 9 memory slices"},
        FailCase{"H100-80GB", "4g.40gb,3g.40gb,1g.10gb", "", "need 9 memory slices"},
        FailCase{"H100-80GB", "4g.40gb,2g.20gb,2g.20gb", "", "need 8 compute slices"},
        FailCase{"H100-80GB", "1g.10gb+me,1g.10gb+me", "", "at most 1 1g.10gb+me"},
        FailCase{"A30-24GB", "1g.6gb+me,2g.12gb+me", "", "media extensions"},
        FailCase{"H200-141GB", "1g.35gb,1g.35gb,1g.35gb,1g.35gb,1g.18gb", "", "need 9 memory slices"},
        // Room in total, but the instance already there sits where the 4g must start.
        FailCase{"A100-40GB", "4g.20gb", "1g.5gb@3", "1g.5gb@3"},
        FailCase{"H100-80GB", "3g.40gb,3g.40gb", "1g.10gb@6", "need 8 memory slices"}));

TEST(MigPlanner, UnknownProfileAndNonMigModelAreInvalidArguments) {
  absl::StatusOr<std::string> plan = Plan("H100-80GB", "3g.20gb");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("unknown MIG profile '3g.20gb'"));
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("3g.40gb"));  // lists the valid ones
  MigLayout l4(*FindGpuModel("L4"));
  std::vector<std::string> names = {"1g.10gb"};
  EXPECT_THAT(std::string(PlanMigLayout(l4, names).status().message()),
              HasSubstr("L4 does not support MIG"));
}

TEST(MigPlanner, PlansOnTopOfExistingInstances) {
  EXPECT_EQ(*Plan("H100-80GB", "1g.10gb", "3g.40gb@4"), "1g.10gb@0");
  EXPECT_EQ(*Plan("H100-80GB", "4g.40gb", "3g.40gb@4"), "4g.40gb@0");
}

TEST(MigPlanner, ProfileNamesAreCaseInsensitiveAndAcceptTheMigPrefix) {
  EXPECT_EQ(*Plan("H100-80GB", "MIG 3G.40GB"), "3g.40gb@4");
}

}  // namespace
}  // namespace gpupool::pool
