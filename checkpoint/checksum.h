// File: checkpoint/checksum.h
//
// The checksum every snapshot carries: XXH3-64, chosen because it runs at memory bandwidth (so a
// checkpoint's cost stays the write, not the hash) and detects the truncations and bit flips a
// crashed writer or a failing disk leave behind. Not a cryptographic hash: it guards against
// accidents, not adversaries.
//
//   uint64_t sum = Checksum64(bytes);
//   Checksummer c; c.Update(part1); c.Update(part2); c.Digest() == Checksum64(part1 + part2);
#ifndef GPUPOOL_CHECKPOINT_CHECKSUM_H_
#define GPUPOOL_CHECKPOINT_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace gpupool::checkpoint {

uint64_t Checksum64(std::span<const std::byte> data);

// Streaming form, for data written in pieces. Not thread-safe.
class Checksummer {
 public:
  Checksummer();
  ~Checksummer();
  Checksummer(const Checksummer&) = delete;
  Checksummer& operator=(const Checksummer&) = delete;

  void Update(std::span<const std::byte> data);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_CHECKSUM_H_
