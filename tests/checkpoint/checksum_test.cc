#include "checkpoint/checksum.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpupool::checkpoint {
namespace {

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

TEST(Checksum, StreamingEqualsOneShot) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  Checksummer c;
  c.Update(Bytes(data.substr(0, 12345)));
  c.Update(Bytes(data.substr(12345)));
  EXPECT_EQ(c.Digest(), Checksum64(Bytes(data)));
}

TEST(Checksum, DetectsEveryOneBitFlipAndTruncation) {
  std::string data = "snapshot payload with some structure 0123456789";
  const uint64_t original = Checksum64(Bytes(data));
  for (size_t byte = 0; byte < data.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = data;
      flipped[byte] = static_cast<char>(flipped[byte] ^ (1 << bit));
      EXPECT_NE(Checksum64(Bytes(flipped)), original) << byte << ":" << bit;
    }
  }
  EXPECT_NE(Checksum64(Bytes(data.substr(0, data.size() - 1))), original);
}

}  // namespace
}  // namespace gpupool::checkpoint
