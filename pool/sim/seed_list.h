// File: pool/sim/seed_list.h
//
// Parses the seed lists of the command line: "42-51" (inclusive range) or "42,43,50" (a list),
// or a mix ("42-44,50"). Fails with kInvalidArgument naming the bad part.
#ifndef GPUPOOL_POOL_SIM_SEED_LIST_H_
#define GPUPOOL_POOL_SIM_SEED_LIST_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpupool::pool::sim {

// At most this many seeds, so that a typo such as "42-4200000" fails fast instead of running.
inline constexpr int kMaxSeeds = 10000;

absl::StatusOr<std::vector<uint64_t>> ParseSeedList(std::string_view text);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_SEED_LIST_H_
