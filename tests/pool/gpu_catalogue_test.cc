#include "pool/gpu_catalogue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

TEST(GpuCatalogue, HasTheModelsTheIssueNames) {
  for (const char* name : {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "L4", "L40S", "A10",
                           "T4", "V100-16GB", "V100-32GB"}) {
    const GpuModel* m = FindGpuModel(name);
    ASSERT_NE(m, nullptr) << name;
    EXPECT_GT(m->memory_mib, 0) << name;
    EXPECT_GT(m->sm_count, 0) << name;
    EXPECT_GT(m->default_price_per_hour, 0) << name;
  }
}

TEST(GpuCatalogue, RealFigures) {
  const GpuModel* h100 = FindGpuModel("H100-80GB");
  EXPECT_EQ(h100->sm_count, 132);
  EXPECT_EQ(h100->compute_capability_major, 9);
  EXPECT_EQ(h100->nvlink.links, 18);
  EXPECT_EQ(h100->nvlink.bandwidth_gbps, 900);
  const GpuModel* a100 = FindGpuModel("A100-40GB");
  EXPECT_EQ(a100->sm_count, 108);
  EXPECT_EQ(a100->compute_capability_major, 8);
  EXPECT_EQ(a100->nvlink.links, 12);
  const GpuModel* t4 = FindGpuModel("T4");
  EXPECT_EQ(t4->compute_capability_major * 10 + t4->compute_capability_minor, 75);
  EXPECT_FALSE(t4->SupportsMig());
  EXPECT_EQ(FindGpuModel("V100-32GB")->nvlink.links, 6);
  EXPECT_FALSE(FindGpuModel("L40S")->SupportsMig());
}

TEST(GpuCatalogue, LookupIsCaseInsensitiveAndUnknownNamesListTheKnownOnes) {
  EXPECT_EQ(FindGpuModel("h100-80gb"), FindGpuModel("H100-80GB"));
  absl::StatusOr<const GpuModel*> m = RequireGpuModel("H100");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("unknown GPU model 'H100'"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("H100-80GB"));
}

TEST(GpuCatalogue, MigProfilesAreSizedByTheirSlices) {
  const GpuModel* h200 = FindGpuModel("H200-141GB");
  const MigProfile* p = h200->FindMigProfile("3g.71gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->compute_slices, 3);
  EXPECT_EQ(p->memory_slices, 4);
  EXPECT_EQ(p->max_instances, 2);
  EXPECT_EQ(p->memory_mib, h200->memory_mib / 8 * 4);
  EXPECT_TRUE(h200->FindMigProfile("1g.18gb+me")->media_extensions);
}

TEST(GpuCatalogue, ComputeInstanceProfilesInsideGpuInstances) {
  const GpuModel* h100 = FindGpuModel("H100-80GB");
  auto slices = [&](const char* gi) {
    std::vector<int> out;
    for (const ComputeInstanceProfile& c : h100->ComputeProfilesFor(*h100->FindMigProfile(gi))) {
      out.push_back(c.compute_slices);
    }
    return out;
  };
  EXPECT_EQ(slices("7g.80gb"), (std::vector<int>{7, 4, 3, 2, 1}));
  EXPECT_EQ(slices("4g.40gb"), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(slices("3g.40gb"), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(slices("1g.10gb"), (std::vector<int>{1}));
  EXPECT_EQ(GpuModel::ComputeProfileName(*h100->FindMigProfile("3g.40gb"), 1), "1c.3g.40gb");
  EXPECT_EQ(GpuModel::ComputeProfileName(*h100->FindMigProfile("3g.40gb"), 3), "3g.40gb");
}

TEST(GpuCatalogue, MatchesDriverNamesByTokenAndMemory) {
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA H100 80GB HBM3", 81559), FindGpuModel("H100-80GB"));
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA A100-SXM4-40GB", 40960), FindGpuModel("A100-40GB"));
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA A100-SXM4-80GB", 81920), FindGpuModel("A100-80GB"));
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA H200", 143771), FindGpuModel("H200-141GB"));
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA L4", 23034), FindGpuModel("L4"));
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA L40S", 46068), FindGpuModel("L40S"));
  EXPECT_EQ(MatchDriverReportedModel("Tesla V100-SXM2-32GB", 32510), FindGpuModel("V100-32GB"));
  // Not in the catalogue: H100 NVL has 94 GB.
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA H100 NVL", 95830), nullptr);
  EXPECT_EQ(MatchDriverReportedModel("NVIDIA GeForce RTX 4090", 24564), nullptr);
}

}  // namespace
}  // namespace gpupool::pool
