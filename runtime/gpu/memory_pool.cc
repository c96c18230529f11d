#include "runtime/gpu/memory_pool.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string Mib(uint64_t bytes) { return absl::StrCat(bytes / kMiB, " MiB"); }

class HostMemoryBackend final : public MemoryBackend {
 public:
  absl::StatusOr<void*> Allocate(uint64_t bytes) override {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
    return p;
  }
  void Free(void* ptr, uint64_t) override { std::free(ptr); }
  absl::Status Zero(void* ptr, uint64_t bytes) override {
    std::memset(ptr, 0, bytes);
    return absl::OkStatus();
  }
  int cuda_device() const override { return -1; }
  void* stream() const override { return nullptr; }
  absl::StatusOr<void*> CreateStream() override { return nullptr; }
  void DestroyStream(void*) override {}
  absl::Status Synchronize(void*) override { return absl::OkStatus(); }
};

}  // namespace

std::unique_ptr<MemoryBackend> MakeHostMemoryBackend() { return std::make_unique<HostMemoryBackend>(); }

GpuMemoryPool::GpuMemoryPool(std::string name, uint64_t physical_bytes,
                             std::unique_ptr<MemoryBackend> backend)
    : name_(std::move(name)), physical_bytes_(physical_bytes), backend_(std::move(backend)) {}

GpuMemoryPool::~GpuMemoryPool() {
  MutexLock lock(&mu_);
  TrimCache();
  for (void* s : all_streams_) backend_->DestroyStream(s);
}

absl::StatusOr<void*> GpuMemoryPool::AcquireStream() {
  {
    MutexLock lock(&mu_);
    if (!idle_streams_.empty()) {
      void* s = idle_streams_.back();
      idle_streams_.pop_back();
      return s;
    }
  }
  absl::StatusOr<void*> created = backend_->CreateStream();
  if (!created.ok()) {
    return absl::Status(created.status().code(),
                        absl::StrCat(name_, ": creating a stream: ", created.status().message()));
  }
  if (*created != nullptr) {
    MutexLock lock(&mu_);
    all_streams_.push_back(*created);
  }
  return *created;
}

void GpuMemoryPool::ReleaseStream(void* stream) {
  if (stream == nullptr) return;
  (void)backend_->Synchronize(stream);  // the next lease starts on an idle stream
  MutexLock lock(&mu_);
  idle_streams_.push_back(stream);
}

size_t GpuMemoryPool::streams_created() const {
  MutexLock lock(&mu_);
  return all_streams_.size();
}

uint64_t GpuMemoryPool::SizeClass(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes >= 2 * kMiB) return (bytes + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
  uint64_t c = 512;
  while (c < bytes) c <<= 1;
  return c;
}

uint64_t GpuMemoryPool::reserved_bytes() const {
  MutexLock lock(&mu_);
  return reserved_;
}

void GpuMemoryPool::TrimCache() {
  for (auto& [capacity, blocks] : cache_) {
    for (const CachedBlock& b : blocks) {
      backend_->Free(b.ptr, capacity);
      reserved_ -= capacity;
    }
  }
  cache_.clear();
}

absl::StatusOr<MemoryBlock*> GpuMemoryPool::Allocate(const std::shared_ptr<MemoryBudget>& budget,
                                                     uint64_t bytes) {
  uint64_t capacity = SizeClass(bytes);
  // Reserve the budget first (lock-free: tasks of one lease may allocate concurrently).
  uint64_t used = budget->used_bytes.load(std::memory_order_relaxed);
  do {
    if (used + capacity > budget->limit_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "allocating ", Mib(capacity), " on ", name_, " would exceed lease ", budget->lease,
          "'s memory budget of ", Mib(budget->limit_bytes), " (", Mib(used), " in use)"));
    }
  } while (!budget->used_bytes.compare_exchange_weak(used, used + capacity, std::memory_order_relaxed));

  void* ptr = nullptr;
  bool scrub = false;
  {
    MutexLock lock(&mu_);
    auto it = cache_.find(capacity);
    if (it != cache_.end() && !it->second.empty()) {
      // Prefer a block this team held last: no scrub needed.
      std::vector<CachedBlock>& blocks = it->second;
      size_t pick = blocks.size() - 1;
      for (size_t i = blocks.size(); i-- > 0;) {
        if (blocks[i].last_team == budget->team) { pick = i; break; }
      }
      ptr = blocks[pick].ptr;
      scrub = blocks[pick].last_team != budget->team;
      blocks[pick] = std::move(blocks.back());
      blocks.pop_back();
    } else {
      if (reserved_ + capacity > physical_bytes_) TrimCache();
      if (reserved_ + capacity > physical_bytes_) {
        budget->used_bytes.fetch_sub(capacity, std::memory_order_relaxed);
        return absl::ResourceExhaustedError(absl::StrCat(
            name_, " is out of memory: ", Mib(capacity), " asked, ",
            Mib(physical_bytes_ - reserved_), " free of ", Mib(physical_bytes_)));
      }
      absl::StatusOr<void*> fresh = backend_->Allocate(capacity);
      if (!fresh.ok()) {
        budget->used_bytes.fetch_sub(capacity, std::memory_order_relaxed);
        return fresh.status();
      }
      ptr = *fresh;
      reserved_ += capacity;
    }
  }
  if (scrub) {
    absl::Status zeroed = backend_->Zero(ptr, capacity);
    if (!zeroed.ok()) {
      // Never hand out memory we could not clean: give it back and fail this allocation.
      MutexLock lock(&mu_);
      backend_->Free(ptr, capacity);
      reserved_ -= capacity;
      budget->used_bytes.fetch_sub(capacity, std::memory_order_relaxed);
      return zeroed;
    }
    scrubbed_.fetch_add(capacity, std::memory_order_relaxed);
  }
  return new MemoryBlock{this, ptr, bytes, capacity, budget, budget->stream};
}

void GpuMemoryPool::Free(MemoryBlock* block) {
  // Kernels on the lease's stream may still read or write the block: wait for them before it can
  // go to another task. (An event per block would let the freeing thread go on; this is simpler
  // and costs only when work is still queued.)
  if (block->stream != nullptr) (void)backend_->Synchronize(block->stream);
  block->budget->used_bytes.fetch_sub(block->capacity, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    cache_[block->capacity].push_back(CachedBlock{block->ptr, block->budget->team});
  }
  delete block;
}

}  // namespace gpupool::runtime
