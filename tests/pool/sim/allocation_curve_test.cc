// The figure at i% arrival, as the paper's analysis computes it.
#include "gtest/gtest.h"
#include "pool/sim/allocation_curve.h"

namespace gpupool::pool::sim {
namespace {

TEST(AllocationCurve, AveragesRowsWhoseRoundedArrivalIsI) {
  AllocationCurve curve(/*cluster_gpus=*/10, /*max_percent=*/5);
  // 10 GPUs: 100 milli is 1%.
  curve.Record(90, 90);    // arrived 0.9% -> 1
  curve.Record(110, 100);  // 1.1% -> 1
  curve.Record(300, 250);  // 3%
  const auto f = curve.Figures();
  ASSERT_EQ(f.size(), 6u);
  EXPECT_DOUBLE_EQ(*f[0], 0.95);  // no row at 0: falls back to the rows at 1
  EXPECT_DOUBLE_EQ(*f[1], 0.95);
  EXPECT_DOUBLE_EQ(*f[2], 1.47);  // none at 2: rows at 1 and 3, (0.9 + 1.0 + 2.5) / 3 rounded
  EXPECT_DOUBLE_EQ(*f[3], 2.5);
  EXPECT_DOUBLE_EQ(*f[4], 2.5);
  EXPECT_FALSE(f[5].has_value());
}

TEST(AllocationCurve, RoundsHalfToEvenLikePython) {
  EXPECT_DOUBLE_EQ(RoundHalfEven(2.5, 0), 2);
  EXPECT_DOUBLE_EQ(RoundHalfEven(3.5, 0), 4);
  EXPECT_DOUBLE_EQ(RoundHalfEven(95.074, 2), 95.07);
}

}  // namespace
}  // namespace gpupool::pool::sim
