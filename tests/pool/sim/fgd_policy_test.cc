// FGD (ATC '23): the fragmentation measure, the typical-shape distribution it is measured
// against, and the decisions that follow from them.
#include <optional>

#include "gtest/gtest.h"
#include "pool/placement/fgd.h"
#include "pool/placement/fgd_fragmentation.h"
#include "pool/placement/shape_distribution.h"
#include "tests/pool/sim/test_cluster.h"

namespace gpupool::pool::sim::testing {
namespace {

using placement::ShapeDistribution;
using placement::ShapeSample;

std::vector<ShapeSample> Samples(std::vector<std::pair<ShapeSample, int>> counts) {
  std::vector<ShapeSample> out;
  for (auto& [s, n] : counts) out.insert(out.end(), n, s);
  return out;
}

TEST(TypicalShapes, KeepTheMostFrequentUntilCoverageAndRenormalise) {
  placement::ModelIndex models;
  const auto samples = Samples({{ShapeSample{4000, 0, 1, 1000, ""}, 6},
                                {ShapeSample{2000, 0, 1, 500, ""}, 3},
                                {ShapeSample{8000, 0, 0, 0, ""}, 1}});
  const ShapeDistribution d = ShapeDistribution::Typical(samples, models, {.coverage = 0.9});
  ASSERT_EQ(d.shapes().size(), 2u);
  EXPECT_EQ(d.shapes()[0].gpu_milli, 1000);
  EXPECT_DOUBLE_EQ(d.shapes()[0].probability, 6.0 / 9.0);
  EXPECT_DOUBLE_EQ(d.shapes()[1].probability, 3.0 / 9.0);
  EXPECT_EQ(ShapeDistribution::Typical(samples, models, {.coverage = 1.0}).shapes().size(), 3u);
}

TEST(TypicalShapes, EqualCountsOrderLargerShapesFirst) {
  placement::ModelIndex models;
  const auto samples = Samples({{ShapeSample{1000, 0, 1, 300, ""}, 2},
                                {ShapeSample{2000, 0, 1, 300, ""}, 2}});
  const ShapeDistribution d = ShapeDistribution::Typical(samples, models);
  ASSERT_EQ(d.shapes().size(), 2u);
  EXPECT_EQ(d.shapes()[0].cpu_milli, 2000);
}

ShapeDistribution HalfWholeHalfShare() {
  placement::ModelIndex models;
  return ShapeDistribution::Typical(Samples({{ShapeSample{1000, 0, 1, 1000, ""}, 1},
                                             {ShapeSample{1000, 0, 1, 500, ""}, 1}}),
                                    models);
}

TEST(FgdFragmentation, CountsWhatEachShapeCannotUse) {
  const ShapeDistribution d = HalfWholeHalfShare();
  // GPUs free {1000, 300}: both shapes fit on GPU 0, neither can use the 300 on GPU 1.
  const std::vector<int16_t> gpus = {1000, 300};
  EXPECT_DOUBLE_EQ(placement::FgdNodeFragmentation(0, 64000, gpus, d.shapes()), 300);
  // Without CPU for either shape, all free capacity is fragmented.
  EXPECT_DOUBLE_EQ(placement::FgdNodeFragmentation(0, 500, gpus, d.shapes()), 1300);
  // {600, 600}: the whole-GPU shape can use nothing, the 500 shape everything.
  const std::vector<int16_t> halves = {600, 600};
  EXPECT_DOUBLE_EQ(placement::FgdNodeFragmentation(0, 64000, halves, d.shapes()), 600);
}

TEST(Fgd, FillsTheComplementaryGpuInsteadOfBreakingAWholeOne) {
  auto state = std::make_optional(MakeCluster({Node("a", 2), Node("b", 2)}));
  Use(*state, "b", Share(500), {1});
  auto fgd = placement::MakeFgdPolicy(HalfWholeHalfShare());
  const placement::Decision d = fgd->Decide(state->view(), Share(500));
  EXPECT_EQ(NameOf(*state, d.node), "b");
  EXPECT_EQ(d.gpus, placement::GpuIndices{1});
}

}  // namespace
}  // namespace gpupool::pool::sim::testing
