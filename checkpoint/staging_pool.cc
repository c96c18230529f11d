#include "checkpoint/staging_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and we touch instead
#endif

namespace gpupool::checkpoint {

absl::StatusOr<std::unique_ptr<StagingBuffer>> StagingBuffer::Allocate(uint64_t capacity) {
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", capacity,
                                                     " bytes of checkpoint staging memory: ",
                                                     std::strerror(errno)));
  }
  // Huge pages first, so the population below faults 2 MiB at a time where THP allows.
  ::madvise(p, capacity, MADV_HUGEPAGE);
  if (::madvise(p, capacity, MADV_POPULATE_WRITE) != 0) {
    const long page = ::sysconf(_SC_PAGESIZE);
    auto* bytes = static_cast<volatile char*>(p);
    for (uint64_t i = 0; i < capacity; i += static_cast<uint64_t>(page)) bytes[i] = 0;
  }
  return std::unique_ptr<StagingBuffer>(new StagingBuffer(static_cast<std::byte*>(p), capacity));
}

StagingBuffer::~StagingBuffer() { ::munmap(data_, capacity_); }

std::unique_ptr<StagingBuffer> StagingPool::TakeFree(uint64_t bytes) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if ((*it)->capacity() >= bytes &&
        (best == free_.end() || (*it)->capacity() < (*best)->capacity())) {
      best = it;
    }
  }
  if (best == free_.end()) return nullptr;
  std::unique_ptr<StagingBuffer> out = std::move(*best);
  free_.erase(best);
  return out;
}

bool StagingPool::Reserve(uint64_t capacity) {
  if (capacity > budget_) return false;
  if (reserved_ + capacity > budget_ && reserved_ - idle() + capacity > budget_) return false;
  // Free idle buffers, smallest first (the big ones are the likeliest to be reused), until it fits.
  std::sort(free_.begin(), free_.end(),
            [](const auto& a, const auto& b) { return a->capacity() > b->capacity(); });
  while (reserved_ + capacity > budget_) {
    reserved_ -= free_.back()->capacity();
    free_.pop_back();
  }
  reserved_ += capacity;
  return true;
}

uint64_t StagingPool::idle() const {
  uint64_t bytes = 0;
  for (const auto& b : free_) bytes += b->capacity();
  return bytes;
}

}  // namespace gpupool::checkpoint
