// OnlineShapes: the workload a policy learns from the requests it is told of.
#include "pool/placement/online_shapes.h"

#include "gtest/gtest.h"

namespace gpupool::pool::placement {
namespace {

PodRequest Share(int gpu_milli, int64_t cpu = 1000) {
  PodRequest r;
  r.cpu_milli = cpu;
  r.memory_mib = 1024;
  r.num_gpu = 1;
  r.gpu_milli = gpu_milli;
  return r;
}

double ProbabilityOf(const ShapeDistribution& d, int gpu_milli) {
  double p = 0;
  for (const TaskShape& s : d.shapes()) {
    if (s.gpu_milli == gpu_milli) p += s.probability;
  }
  return p;
}

TEST(OnlineShapes, SharesFollowWhatWasObserved) {
  OnlineShapes shapes;
  for (int i = 0; i < 30; ++i) shapes.Observe(Share(500));
  for (int i = 0; i < 10; ++i) shapes.Observe(Share(1000));
  const ShapeDistribution d = shapes.Distribution();
  ASSERT_EQ(d.shapes().size(), 2u);
  EXPECT_NEAR(ProbabilityOf(d, 500), 0.75, 0.01);
  EXPECT_NEAR(ProbabilityOf(d, 1000), 0.25, 0.01);
  EXPECT_EQ(d.shapes()[0].gpu_milli, 500) << "most likely shape first";
}

TEST(OnlineShapes, OldObservationsFadeWithTheHalfLife) {
  OnlineShapes shapes({.half_life = 100});
  for (int i = 0; i < 100; ++i) shapes.Observe(Share(500));
  for (int i = 0; i < 100; ++i) shapes.Observe(Share(250));
  // The first hundred weigh half as much as the second: 1/3 against 2/3, not 1/2 each.
  const ShapeDistribution d = shapes.Distribution();
  EXPECT_NEAR(ProbabilityOf(d, 500), 1.0 / 3, 0.01);
  EXPECT_NEAR(ProbabilityOf(d, 250), 2.0 / 3, 0.01);
}

TEST(OnlineShapes, SurvivesLongStreamsWithoutOverflow) {
  OnlineShapes shapes({.half_life = 10});
  for (int i = 0; i < 20000; ++i) shapes.Observe(Share(i % 2 == 0 ? 500 : 250));
  const ShapeDistribution d = shapes.Distribution();
  EXPECT_NEAR(ProbabilityOf(d, 500) + ProbabilityOf(d, 250), 1.0, 1e-9);
  EXPECT_NEAR(ProbabilityOf(d, 500), 0.5, 0.05);
}

TEST(OnlineShapes, RebuildsOftenAtFirstThenRarely) {
  OnlineShapes shapes({.rebuild_share = 0.05});
  shapes.Observe(Share(500));
  EXPECT_EQ(shapes.version(), 1u) << "the first request is worth a model";
  for (int i = 1; i < 20; ++i) shapes.Observe(Share(500));
  const uint64_t early = shapes.version();
  EXPECT_EQ(early, 20u);
  for (int i = 0; i < 10000; ++i) shapes.Observe(Share(500));
  // 5% growth per rebuild from 20 to 10,020 observations: about ln(501)/ln(1.05) = 127 more.
  EXPECT_GT(shapes.version() - early, 100u);
  EXPECT_LT(shapes.version() - early, 160u);
}

TEST(OnlineShapes, KeysModelConstraintsApart) {
  OnlineShapes shapes;
  PodRequest g2 = Share(1000);
  g2.models.any = false;
  g2.models.mask = 0b10;
  shapes.Observe(g2);
  shapes.Observe(Share(1000));
  const ShapeDistribution d = shapes.Distribution();
  ASSERT_EQ(d.shapes().size(), 2u);
  int constrained = 0;
  for (const TaskShape& s : d.shapes()) constrained += s.models.any ? 0 : 1;
  EXPECT_EQ(constrained, 1);
}

TEST(OnlineShapes, ForgetsShapesLongUnseenSoALongLivedPoolStaysSmall) {
  // Every request a shape of its own for a while (as CPU and memory may vary), then the same one:
  // the distinct ones fade and are forgotten, the live one stays.
  OnlineShapes shapes({.half_life = 100});
  for (int i = 0; i < 1000; ++i) {
    PodRequest r = Share(500);
    r.cpu_milli = 1000 + i;
    shapes.Observe(r);
  }
  EXPECT_GE(shapes.size(), 900u) << "forgotten while still weighing something";
  for (int i = 0; i < 5000; ++i) shapes.Observe(Share(250));
  EXPECT_EQ(shapes.size(), 1u) << "shapes unseen for 40 half-lives are still kept";
  EXPECT_NEAR(ProbabilityOf(shapes.Distribution(), 250), 1.0, 1e-6);
}

}  // namespace
}  // namespace gpupool::pool::placement
