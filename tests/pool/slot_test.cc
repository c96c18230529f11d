#include "pool/slot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::pool {
namespace {

using ::testing::HasSubstr;

const GpuModel& H100() { return *FindGpuModel("H100-80GB"); }

TEST(GpuSlots, FractionsShareAGpuWithinMemoryAndCompute) {
  GpuSlots gpu(H100());
  ASSERT_TRUE(gpu.Carve(SlotShape::Fraction(40000, 500)).ok());
  ASSERT_TRUE(gpu.Carve(SlotShape::Fraction(30000, 250)).ok());
  absl::Status s = gpu.CanCarve(SlotShape::Fraction(20000, 100));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("MiB are free"));
  s = gpu.CanCarve(SlotShape::Fraction(1000, 300));
  EXPECT_THAT(std::string(s.message()), HasSubstr("250 are free"));
  EXPECT_TRUE(gpu.CanCarve(SlotShape::Fraction(1000, 250)).ok());
}

TEST(GpuSlots, OneKindPerGpuUntilItEmpties) {
  GpuSlots gpu(H100());
  absl::StatusOr<int> id = gpu.Carve(SlotShape::Mps(25, 20000));
  ASSERT_TRUE(id.ok());
  EXPECT_THAT(std::string(gpu.CanCarve(SlotShape::Fraction(1000, 100)).message()),
              HasSubstr("GPU serves mps slots"));
  EXPECT_FALSE(gpu.CanCarve(SlotShape::WholeGpu()).ok());
  ASSERT_TRUE(gpu.Release(*id).ok());
  EXPECT_TRUE(gpu.CanCarve(SlotShape::WholeGpu()).ok());
}

TEST(GpuSlots, MigSlotsUseThePlanner) {
  GpuSlots gpu(H100());
  ASSERT_TRUE(gpu.Carve(SlotShape::Mig("3g.40gb")).ok());
  ASSERT_TRUE(gpu.Carve(SlotShape::Mig("4g.40gb")).ok());
  EXPECT_EQ(gpu.mig_layout().ToString(), "3g.40gb@4, 4g.40gb@0");
  EXPECT_FALSE(gpu.CanCarve(SlotShape::Mig("1g.10gb")).ok());
  EXPECT_EQ(gpu.FreeComputeMilli(), 0);
}

TEST(GpuSlots, MpsClientLimitAndThreadShare) {
  GpuSlots gpu(H100());
  for (int i = 0; i < kMaxMpsClientsPerGpu; ++i) {
    ASSERT_TRUE(gpu.Carve(SlotShape::Mps(1, 1000)).ok()) << i;
  }
  EXPECT_THAT(std::string(gpu.CanCarve(SlotShape::Mps(1, 1000)).message()), HasSubstr("48 MPS clients"));
  GpuSlots other(H100());
  ASSERT_TRUE(other.Carve(SlotShape::Mps(60, 1000)).ok());
  EXPECT_THAT(std::string(other.CanCarve(SlotShape::Mps(50, 1000)).message()), HasSubstr("40% are unassigned"));
}

TEST(SlotShape, ValidationNamesTheFieldAndRange) {
  EXPECT_THAT(std::string(ValidateSlotShape(SlotShape::Fraction(100, 100), H100()).message()),
              HasSubstr("memory budget 100 MiB is outside 256..81559"));
  EXPECT_THAT(std::string(ValidateSlotShape(SlotShape::Fraction(1000, 0), H100()).message()),
              HasSubstr("compute share 0 is outside 1..1000"));
  EXPECT_THAT(std::string(ValidateSlotShape(SlotShape::Mps(101, 1000), H100()).message()),
              HasSubstr("outside 1..100"));
  EXPECT_THAT(std::string(ValidateSlotShape(SlotShape::Mig("2g.10gb"), H100()).message()),
              HasSubstr("unknown MIG profile"));
  EXPECT_EQ(SlotShape::Fraction(2048, 250).ToString(), "fraction:2048MiB/250m");
}

}  // namespace
}  // namespace gpupool::pool
