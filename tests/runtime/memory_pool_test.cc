// GpuMemoryPool's stream pool and the ordering of frees after a lease's work, against a backend
// that records what the pool asks of it (the CUDA backend does the same calls on a real GPU).
#include "runtime/gpu/memory_pool.h"

#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace gpupool::runtime {
namespace {

struct Log {
  int streams_created = 0;
  int streams_destroyed = 0;
  std::vector<void*> synchronized;
};

// Host memory, with distinct stream handles and a record of synchronisations.
class RecordingBackend final : public MemoryBackend {
 public:
  explicit RecordingBackend(Log* log) : log_(log), host_(MakeHostMemoryBackend()) {}
  absl::StatusOr<void*> Allocate(uint64_t bytes) override { return host_->Allocate(bytes); }
  void Free(void* ptr, uint64_t bytes) override { host_->Free(ptr, bytes); }
  absl::Status Zero(void* ptr, uint64_t bytes) override { return host_->Zero(ptr, bytes); }
  int cuda_device() const override { return 0; }
  void* stream() const override { return nullptr; }
  absl::StatusOr<void*> CreateStream() override {
    handles_.push_back(std::make_unique<char>());
    ++log_->streams_created;
    return static_cast<void*>(handles_.back().get());
  }
  void DestroyStream(void*) override { ++log_->streams_destroyed; }
  absl::Status Synchronize(void* stream) override {
    log_->synchronized.push_back(stream);
    return absl::OkStatus();
  }

 private:
  Log* log_;
  std::unique_ptr<MemoryBackend> host_;
  std::vector<std::unique_ptr<char>> handles_;
};

TEST(GpuMemoryPoolStreams, ConcurrentLeasesGetTheirOwnStreamsWhichAreReused) {
  Log log;
  {
    GpuMemoryPool pool("node-0/GPU 0", 1ull << 30, std::make_unique<RecordingBackend>(&log));
    std::set<void*> held;
    for (int i = 0; i < 4; ++i) held.insert(*pool.AcquireStream());
    EXPECT_EQ(held.size(), 4u);  // four fractional leases, four streams
    void* first = *held.begin();
    pool.ReleaseStream(first);
    ASSERT_EQ(log.synchronized.size(), 1u);
    EXPECT_EQ(log.synchronized[0], first);  // waited for before reuse
    EXPECT_EQ(*pool.AcquireStream(), first);  // reused, not created
    EXPECT_EQ(pool.streams_created(), 4u);
  }
  EXPECT_EQ(log.streams_created, 4);
  EXPECT_EQ(log.streams_destroyed, 4);
}

TEST(GpuMemoryPoolStreams, FreeWaitsForTheLeaseStreamBeforeTheBlockIsReused) {
  Log log;
  GpuMemoryPool pool("node-0/GPU 0", 1ull << 30, std::make_unique<RecordingBackend>(&log));
  auto budget = std::make_shared<MemoryBudget>();
  budget->team = "vision";
  budget->limit_bytes = 64 << 20;
  budget->stream = *pool.AcquireStream();
  MemoryBlock* block = *pool.Allocate(budget, 1 << 20);
  EXPECT_EQ(block->stream, budget->stream);
  EXPECT_TRUE(log.synchronized.empty());
  pool.Free(block);
  ASSERT_EQ(log.synchronized.size(), 1u);
  EXPECT_EQ(log.synchronized[0], budget->stream);
  EXPECT_EQ(budget->used_bytes.load(), 0u);
}

TEST(GpuMemoryPoolStreams, HostStandInHasNoStreams) {
  GpuMemoryPool pool("node-0/GPU 0", 1ull << 30, MakeHostMemoryBackend());
  EXPECT_EQ(*pool.AcquireStream(), nullptr);
  pool.ReleaseStream(nullptr);
  EXPECT_EQ(pool.streams_created(), 0u);
}

}  // namespace
}  // namespace gpupool::runtime
