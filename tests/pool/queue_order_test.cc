// The cycle's order stage (queue_order.h): guarantee, priority, aged share, submission order.
#include "pool/scheduler/queue_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace gpupool::pool {
namespace {

std::vector<uint64_t> Sorted(std::vector<QueueKey> keys) {
  std::sort(keys.begin(), keys.end(), QueueBefore);
  std::vector<uint64_t> handles;
  for (const QueueKey& k : keys) handles.push_back(k.handle);
  return handles;
}

TEST(QueueOrder, GuaranteedWorkFirstThenPriorityThenShareThenSubmission) {
  EXPECT_EQ(Sorted({{.borrowing = true, .priority = 900, .share = 0, .handle = 1},
                    {.borrowing = false, .priority = 100, .share = 5, .handle = 2}}),
            (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(Sorted({{.priority = 100, .share = 0, .handle = 1}, {.priority = 200, .share = 9, .handle = 2}}),
            (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(Sorted({{.priority = 100, .share = 0.5, .handle = 1}, {.priority = 100, .share = 0.25, .handle = 2}}),
            (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(Sorted({{.handle = 3}, {.handle = 1}, {.handle = 2}}), (std::vector<uint64_t>{1, 2, 3}));
}

TEST(QueueOrder, WaitingEarnsOneShareUnitPerHorizon) {
  EXPECT_DOUBLE_EQ(AgedShare(0.75, 3600, 3600), -0.25);
  EXPECT_DOUBLE_EQ(AgedShare(0.75, 1800, 3600), 0.25);
  EXPECT_DOUBLE_EQ(AgedShare(0.5, 10, 0), -9.5);  // a zero horizon counts as one second
  // A team with a larger share overtakes once it has waited long enough.
  const QueueKey old_big{.share = AgedShare(0.9, 7200, 3600), .handle = 2};
  const QueueKey new_small{.share = AgedShare(0.1, 0, 3600), .handle = 1};
  EXPECT_TRUE(QueueBefore(old_big, new_small));
}

}  // namespace
}  // namespace gpupool::pool
