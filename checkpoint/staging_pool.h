// File: checkpoint/staging_pool.h
//
// The memory an asynchronous snapshot is copied into at a safe point, so the task can go on
// changing its own state while the copy is written. Buffers are pre-faulted when allocated (a
// first touch of 1 GiB costs ~262k page faults, several times the memcpy itself) and reused
// afterwards, and their total never exceeds the budget.
//
// Not thread-safe: AsyncSnapshotWriter calls it under its own mutex, and allocates the memory a
// reservation stands for outside that mutex (StagingBuffer::Allocate is slow for large sizes).
#ifndef GPUPOOL_CHECKPOINT_STAGING_POOL_H_
#define GPUPOOL_CHECKPOINT_STAGING_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace gpupool::checkpoint {

class StagingBuffer {
 public:
  // Anonymous memory of `capacity` bytes (a multiple of kStagingGranule), transparent huge pages
  // requested, every page faulted in before return. ResourceExhausted if the mapping fails.
  static absl::StatusOr<std::unique_ptr<StagingBuffer>> Allocate(uint64_t capacity);
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t capacity() const { return capacity_; }

 private:
  StagingBuffer(std::byte* data, uint64_t capacity) : data_(data), capacity_(capacity) {}
  std::byte* const data_;
  const uint64_t capacity_;
};

// One huge page: sizes are rounded up to it so buffers of similar snapshots are interchangeable.
inline constexpr uint64_t kStagingGranule = 2 << 20;
inline uint64_t RoundUpToGranule(uint64_t bytes) {
  return (bytes + kStagingGranule - 1) / kStagingGranule * kStagingGranule;
}

class StagingPool {
 public:
  explicit StagingPool(uint64_t budget_bytes) : budget_(budget_bytes) {}

  // The smallest free buffer holding at least `bytes`, or null.
  std::unique_ptr<StagingBuffer> TakeFree(uint64_t bytes);
  // Reserves budget for a new buffer of `capacity` bytes (a granule multiple), freeing idle
  // buffers if that makes room. False if buffers in use leave no room.
  bool Reserve(uint64_t capacity);
  // Gives back a reservation whose allocation failed.
  void Unreserve(uint64_t capacity) { reserved_ -= capacity; }
  // A buffer allocated from a reservation, or taken from the pool, comes back here when done.
  void Return(std::unique_ptr<StagingBuffer> buffer) { free_.push_back(std::move(buffer)); }

  uint64_t budget() const { return budget_; }
  // Bytes of memory allocated or reserved, in use or idle.
  uint64_t reserved() const { return reserved_; }
  uint64_t idle() const;

 private:
  const uint64_t budget_;
  uint64_t reserved_ = 0;
  std::vector<std::unique_ptr<StagingBuffer>> free_;
};

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_STAGING_POOL_H_
