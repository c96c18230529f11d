// File: pool/placement/random_stream.h
//
// A seeded random stream whose draws are the same on every compiler and standard library:
// std::mt19937_64's raw output is specified by the standard, but std::uniform_int_distribution's
// mapping is not, so integers in a range are drawn here by rejection from the raw bits.
#ifndef GPUPOOL_POOL_PLACEMENT_RANDOM_STREAM_H_
#define GPUPOOL_POOL_PLACEMENT_RANDOM_STREAM_H_

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace gpupool::pool::placement {

class RandomStream {
 public:
  explicit RandomStream(uint64_t seed) : engine_(seed) {}

  uint64_t Next() { return engine_(); }

  // Uniform in [0, n); n must be positive.
  uint64_t Below(uint64_t n) {
    // Values below `threshold` (= 2^64 mod n) would make the low residues more likely.
    const uint64_t threshold = (uint64_t{0} - n) % n;
    for (;;) {
      const uint64_t r = engine_();
      if (r >= threshold) return r % n;
    }
  }

  // Fisher-Yates, from the back, so the result depends only on the seed and the length.
  template <typename T>
  void Shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(Below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_RANDOM_STREAM_H_
