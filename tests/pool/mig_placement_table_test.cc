// Every single-profile placement on an empty GPU, compared with NVIDIA's published placement
// tables (MIG user guide, "Supported MIG Profiles", and `nvidia-smi mig -lgipp`, which prints
// "Placements: {starts}:size" per profile). A mismatch here means the simulated driver and the
// planner would accept or refuse something the hardware does not.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/gpu_catalogue.h"
#include "pool/mig_layout.h"

namespace gpupool::pool {
namespace {

// The -lgipp form: "{0,2,4}:2".
std::string PlacementsOf(const GpuModel& model, const MigProfile& profile) {
  MigLayout empty(model);
  return absl::StrCat("{", absl::StrJoin(empty.FreeStarts(profile), ","), "}:",
                      profile.memory_slices);
}

void ExpectTable(absl::string_view model_name, const std::map<std::string, std::string>& published) {
  const GpuModel* model = FindGpuModel(model_name);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->mig_profiles.size(), published.size()) << model_name;
  for (const auto& [profile_name, placements] : published) {
    const MigProfile* profile = model->FindMigProfile(profile_name);
    ASSERT_NE(profile, nullptr) << model_name << " lacks " << profile_name;
    EXPECT_EQ(PlacementsOf(*model, *profile), placements) << model_name << " " << profile_name;
  }
}

TEST(MigPlacementTable, A100_40GB) {
  ExpectTable("A100-40GB", {{"1g.5gb", "{0,1,2,3,4,5,6}:1"},
                            {"1g.5gb+me", "{0,1,2,3,4,5,6}:1"},
                            {"1g.10gb", "{0,2,4,6}:2"},
                            {"2g.10gb", "{0,2,4}:2"},
                            {"3g.20gb", "{0,4}:4"},
                            {"4g.20gb", "{0}:4"},
                            {"7g.40gb", "{0}:8"}});
}

TEST(MigPlacementTable, H100_80GB) {
  ExpectTable("H100-80GB", {{"1g.10gb", "{0,1,2,3,4,5,6}:1"},
                            {"1g.10gb+me", "{0,1,2,3,4,5,6}:1"},
                            {"1g.20gb", "{0,2,4,6}:2"},
                            {"2g.20gb", "{0,2,4}:2"},
                            {"3g.40gb", "{0,4}:4"},
                            {"4g.40gb", "{0}:4"},
                            {"7g.80gb", "{0}:8"}});
}

TEST(MigPlacementTable, H200_141GB) {
  ExpectTable("H200-141GB", {{"1g.18gb", "{0,1,2,3,4,5,6}:1"},
                             {"1g.18gb+me", "{0,1,2,3,4,5,6}:1"},
                             {"1g.35gb", "{0,2,4,6}:2"},
                             {"2g.35gb", "{0,2,4}:2"},
                             {"3g.71gb", "{0,4}:4"},
                             {"4g.71gb", "{0}:4"},
                             {"7g.141gb", "{0}:8"}});
}

TEST(MigPlacementTable, A100_80GB) {
  ExpectTable("A100-80GB", {{"1g.10gb", "{0,1,2,3,4,5,6}:1"},
                            {"1g.10gb+me", "{0,1,2,3,4,5,6}:1"},
                            {"1g.20gb", "{0,2,4,6}:2"},
                            {"2g.20gb", "{0,2,4}:2"},
                            {"3g.40gb", "{0,4}:4"},
                            {"4g.40gb", "{0}:4"},
                            {"7g.80gb", "{0}:8"}});
}

TEST(MigPlacementTable, A30_24GB) {
  ExpectTable("A30-24GB", {{"1g.6gb", "{0,1,2,3}:1"},
                           {"1g.6gb+me", "{0,1,2,3}:1"},
                           {"2g.12gb", "{0,2}:2"},
                           {"2g.12gb+me", "{0,2}:2"},
                           {"4g.24gb", "{0}:4"}});
}

// The published instance counts ("Number of Instances Available").
TEST(MigPlacementTable, InstanceLimitsMatchPublishedCounts) {
  const std::map<std::string, int> h100 = {{"1g.10gb", 7}, {"1g.10gb+me", 1}, {"1g.20gb", 4},
                                           {"2g.20gb", 3}, {"3g.40gb", 2},    {"4g.40gb", 1},
                                           {"7g.80gb", 1}};
  const GpuModel* model = FindGpuModel("H100-80GB");
  for (const auto& [name, count] : h100) {
    const MigProfile* p = model->FindMigProfile(name);
    EXPECT_EQ(p->max_instances, count) << name;
    // The limit is also what the layout rules allow in practice: fill greedily and count.
    MigLayout layout(*model);
    int placed = 0;
    while (!layout.FreeStarts(*p).empty()) {
      ASSERT_TRUE(layout.Add(*p, layout.FreeStarts(*p).front()).ok());
      ++placed;
    }
    EXPECT_EQ(placed, count) << name;
  }
}

// Every start a profile does not list is refused with InvalidArgument naming the allowed ones.
TEST(MigPlacementTable, DisallowedStartsAreRefused) {
  const GpuModel* model = FindGpuModel("A100-40GB");
  for (const MigProfile& p : model->mig_profiles) {
    for (int start = -1; start <= 8; ++start) {
      MigLayout empty(*model);
      absl::Status s = empty.CanAdd(p, start);
      bool allowed = std::find(p.allowed_starts.begin(), p.allowed_starts.end(), start) !=
                     p.allowed_starts.end();
      EXPECT_EQ(s.ok(), allowed) << p.name << "@" << start << ": " << s;
      if (!allowed) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_NE(s.message().find("allowed starts"), absl::string_view::npos) << s;
      }
    }
  }
}

}  // namespace
}  // namespace gpupool::pool
