#include "checkpoint/checksum.h"

#include <xxhash.h>

namespace gpupool::checkpoint {

uint64_t Checksum64(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

struct Checksummer::State {
  XXH3_state_t* xxh = XXH3_createState();
  ~State() { XXH3_freeState(xxh); }
};

Checksummer::Checksummer() : state_(std::make_unique<State>()) { XXH3_64bits_reset(state_->xxh); }
Checksummer::~Checksummer() = default;

void Checksummer::Update(std::span<const std::byte> data) {
  XXH3_64bits_update(state_->xxh, data.data(), data.size());
}

uint64_t Checksummer::Digest() const { return XXH3_64bits_digest(state_->xxh); }

}  // namespace gpupool::checkpoint
