#include "checkpoint/staging_pool.h"

#include <gtest/gtest.h>

namespace gpupool::checkpoint {
namespace {

constexpr uint64_t kGranule = kStagingGranule;

std::unique_ptr<StagingBuffer> Make(StagingPool& pool, uint64_t capacity) {
  if (!pool.Reserve(capacity)) return nullptr;
  auto buffer = StagingBuffer::Allocate(capacity);
  EXPECT_TRUE(buffer.ok());
  return std::move(*buffer);
}

TEST(StagingPool, SizesRoundUpToWholeHugePages) {
  EXPECT_EQ(RoundUpToGranule(1), kGranule);
  EXPECT_EQ(RoundUpToGranule(kGranule), kGranule);
  EXPECT_EQ(RoundUpToGranule(kGranule + 1), 2 * kGranule);
}

TEST(StagingPool, AllocatedMemoryIsWritableEverywhere) {
  auto buffer = StagingBuffer::Allocate(2 * kGranule);
  ASSERT_TRUE(buffer.ok());
  (*buffer)->data()[0] = std::byte{1};
  (*buffer)->data()[2 * kGranule - 1] = std::byte{2};
  EXPECT_EQ((*buffer)->data()[2 * kGranule - 1], std::byte{2});
}

TEST(StagingPool, NeverReservesBeyondTheBudget) {
  StagingPool pool(4 * kGranule);
  EXPECT_FALSE(pool.Reserve(5 * kGranule));
  auto a = Make(pool, 3 * kGranule);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(pool.Reserve(2 * kGranule));  // `a` is in use
  EXPECT_EQ(pool.reserved(), 3 * kGranule);
}

TEST(StagingPool, IdleBuffersAreReusedBestFitAndFreedOnlyToMakeRoom) {
  StagingPool pool(8 * kGranule);
  auto small = Make(pool, kGranule);
  auto big = Make(pool, 4 * kGranule);
  std::byte* big_data = big->data();
  pool.Return(std::move(small));
  pool.Return(std::move(big));
  EXPECT_EQ(pool.idle(), 5 * kGranule);

  auto reused = pool.TakeFree(3 * kGranule);  // only the big one fits
  ASSERT_NE(reused, nullptr);
  EXPECT_EQ(reused->data(), big_data);
  EXPECT_EQ(pool.TakeFree(2 * kGranule), nullptr);

  // 5 reserved (1 idle); 4 more fit only by freeing the idle one.
  EXPECT_TRUE(pool.Reserve(4 * kGranule));
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_EQ(pool.reserved(), 8 * kGranule);
  pool.Unreserve(4 * kGranule);
  EXPECT_EQ(pool.reserved(), 4 * kGranule);
}

}  // namespace
}  // namespace gpupool::checkpoint
