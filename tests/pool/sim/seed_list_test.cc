#include "gtest/gtest.h"
#include "pool/sim/seed_list.h"

namespace gpupool::pool::sim {
namespace {

TEST(SeedList, RangesListsAndMixes) {
  EXPECT_EQ(*ParseSeedList("42-51"), (std::vector<uint64_t>{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}));
  EXPECT_EQ(*ParseSeedList("1,3,5"), (std::vector<uint64_t>{1, 3, 5}));
  EXPECT_EQ(*ParseSeedList("42-44,50"), (std::vector<uint64_t>{42, 43, 44, 50}));
  EXPECT_EQ(*ParseSeedList("7"), (std::vector<uint64_t>{7}));
}

TEST(SeedList, RejectsWhatIsNotASeedList) {
  for (const char* bad : {"", "a-b", "5-3", "1,,2", "-3", "1-", " 4", "1-100000"}) {
    absl::StatusOr<std::vector<uint64_t>> r = ParseSeedList(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

}  // namespace
}  // namespace gpupool::pool::sim
