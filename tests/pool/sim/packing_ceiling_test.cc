#include "pool/sim/packing_ceiling.h"

#include <vector>

#include "gtest/gtest.h"

namespace gpupool::pool::sim {
namespace {

TEST(PackingCeilingTest, FirstFitDecreasingPairsBigWithSmall) {
  // Decreasing order puts 810, 810, 600 first, then 190, 190 into the 810s' bins and 400 into
  // the 600's: three bins.
  EXPECT_EQ(FirstFitDecreasingBins({190, 810, 400, 190, 600, 810}), 3);
  EXPECT_EQ(FirstFitDecreasingBins({}), 0);
  EXPECT_EQ(FirstFitDecreasingBins({1000, 1, 999}), 2);
}

TEST(PackingCeilingTest, LowerBoundSeesItemsThatCannotShare) {
  // Three items over half a GPU need three GPUs although they sum to 1.8.
  EXPECT_EQ(BinCountLowerBound(std::vector<int>{600, 600, 600}), 3);
  // 810s leave 190 each; the two 300s fit in no such room: 2 + ceil(600/1000) = 3.
  EXPECT_EQ(BinCountLowerBound(std::vector<int>{810, 810, 300, 300}), 3);
  // The sum bound when everything is small.
  EXPECT_EQ(BinCountLowerBound(std::vector<int>{250, 250, 250, 250, 250}), 2);
  EXPECT_EQ(BinCountLowerBound(std::vector<int>{}), 0);
}

TEST(PackingCeilingTest, LowerBoundNeverExceedsFirstFitDecreasing) {
  // A deterministic spread of sizes: FFD is a packing, so it can never use fewer bins than a
  // lower bound (this fails if either is wrong in the direction that would overstate a ceiling).
  std::vector<int> sizes;
  for (int i = 0; i < 400; ++i) sizes.push_back(50 + (i * 137) % 950);
  EXPECT_LE(BinCountLowerBound(sizes), FirstFitDecreasingBins(sizes));
}

std::vector<NodeCapacity> TwoGpus() {
  return {{.name = "a", .model = "G2", .cpu_milli = 1000, .memory_mib = 1024, .num_gpu = 1},
          {.name = "b", .model = "G2", .cpu_milli = 1000, .memory_mib = 1024, .num_gpu = 1}};
}

TEST(PackingCeilingTest, StrandedShareRoomCapsTheAllocation) {
  // Two 600m shares cannot share a GPU, so they hold both GPUs and the whole-GPU pod can never
  // be placed: at most 1.2 of the 2 GPUs, although 2.2 GPUs of work arrived by 130%.
  std::vector<PodSpec> pods = {{.name = "s1", .num_gpu = 1, .gpu_milli = 600},
                               {.name = "s2", .num_gpu = 1, .gpu_milli = 600},
                               {.name = "w", .num_gpu = 1, .gpu_milli = 1000}};
  absl::StatusOr<PackingCeiling> c =
      EstimatePackingCeiling(TwoGpus(), pods, /*tune=*/0, /*seed=*/1, /*percent=*/130);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cluster_gpus, 2);
  EXPECT_EQ(c->arrived_milli, 2200);
  EXPECT_EQ(c->share_pods, 2);
  EXPECT_EQ(c->share_milli, 1200);
  EXPECT_EQ(c->bins_lower_bound, 2);
  EXPECT_EQ(c->bins_ffd, 2);
  EXPECT_DOUBLE_EQ(c->ceiling_pct_bound, 60.0);
  EXPECT_DOUBLE_EQ(c->ceiling_pct_ffd, 60.0);
}

TEST(PackingCeilingTest, OnlyWhatArrivedByThePercentageCounts) {
  // At 50% arrival of 2 GPUs at most 1 GPU of work has arrived: only the first of a 600m share
  // and a whole-GPU pod (both, 1.6 GPUs, would pass it).
  std::vector<PodSpec> pods = {{.name = "s", .num_gpu = 1, .gpu_milli = 600},
                               {.name = "w", .num_gpu = 1, .gpu_milli = 1000}};
  absl::StatusOr<PackingCeiling> c = EstimatePackingCeiling(TwoGpus(), pods, 0, 1, /*percent=*/50);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_LE(c->arrived_milli, 1000);
  EXPECT_GT(c->arrived_milli, 0);
  EXPECT_DOUBLE_EQ(c->ceiling_pct_bound, c->arrived_milli / 20.0);  // nothing is stranded
}

TEST(PackingCeilingTest, RefusesAClusterWithoutGpus) {
  std::vector<NodeCapacity> nodes = {
      {.name = "a", .model = "G2", .cpu_milli = 1000, .memory_mib = 1024, .num_gpu = 0}};
  EXPECT_FALSE(EstimatePackingCeiling(nodes, {}, 1.3, 1).ok());
}

}  // namespace
}  // namespace gpupool::pool::sim
