#include "runtime/rpc/lease_codec.h"

#include <gtest/gtest.h>

namespace gpupool::rpc {
namespace {

// Every cause the scheduler gives crosses the wire as itself: a job told "reclaim" for a move
// would report the wrong reason to its user.
TEST(LeaseCodec, EveryRevokeCauseRoundTrips) {
  for (pool::RevokeCause cause : {pool::RevokeCause::kReclaim, pool::RevokeCause::kPriority,
                                  pool::RevokeCause::kDrain, pool::RevokeCause::kMove}) {
    EXPECT_EQ(DecodeRevokeCause(EncodeRevokeCause(cause)), cause) << pool::RevokeCauseName(cause);
  }
}

}  // namespace
}  // namespace gpupool::rpc
