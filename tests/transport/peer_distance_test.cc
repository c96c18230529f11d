// Choosing the nearest copy of an object: same host (shared memory) before the same rack before
// the rest, the caller's order kept among equals, unknown places treated as far.
#include "transport/peer_distance.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpupool::transport {
namespace {

using ::testing::ElementsAre;

TEST(PeerDistance, SameHostThenSameRackThenTheRest) {
  EXPECT_EQ(Distance({"a", "r1"}, {"a", "r2"}), 0);  // one machine, whatever its labels say
  EXPECT_EQ(Distance({"a", "r1"}, {"b", "r1"}), 1);
  EXPECT_EQ(Distance({"a", "r1"}, {"b", "r2"}), 2);
  EXPECT_EQ(Distance({"a", ""}, {"b", ""}), 2);  // no rack label: not "the same rack"
  EXPECT_EQ(Distance({"", ""}, {"", ""}), 2);    // nobody said where: far
}

TEST(PeerDistance, NearestFirstKeepsTheGivenOrderAmongEquals) {
  // Ranks 0..4: 0 and 3 on host h0 (rack r1), 1 on h1 (rack r1), 2 on h2 (rack r2), 4 on h3 (r2).
  std::vector<PeerPlace> places = {{"h0", "r1"}, {"h1", "r1"}, {"h2", "r2"}, {"h0", "r1"}, {"h3", "r2"}};
  // Rank 3 reads an object of rank 2 (the owner, listed first) with copies on 4, 1 and 0.
  EXPECT_THAT(NearestFirst(places, 3, {2, 4, 1, 0}), ElementsAre(0, 1, 2, 4));
  // Rank 2's own rack first; the owner (1) before the other far copy (0).
  EXPECT_THAT(NearestFirst(places, 2, {1, 4, 0}), ElementsAre(4, 1, 0));
  // Every source equally far: the owner-first order is kept.
  EXPECT_THAT(NearestFirst(places, 4, {0, 3, 1}), ElementsAre(0, 3, 1));
}

TEST(PeerDistance, UnknownRanksAndPlacesCountAsFar) {
  std::vector<PeerPlace> places = {{"h0", ""}, {"h0", ""}};
  EXPECT_THAT(NearestFirst(places, 0, {7, 1}), ElementsAre(1, 7));
  EXPECT_THAT(NearestFirst({}, 0, {2, 1}), ElementsAre(2, 1));  // a job that described nothing
}

}  // namespace
}  // namespace gpupool::transport
