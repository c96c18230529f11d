// File: runtime/gpu/memory_pool.h
//
// In-process GPU memory pooling: one GpuMemoryPool per GPU the process uses, shared by every lease
// (and so every task) on that GPU. Each lease allocates through a MemoryBudget; an allocation that
// would take the lease past its budget fails in that task only, with the figures in the message.
//
// Freed blocks are cached by size class and remember the team that last held them. A block handed
// to a different team is zeroed first: device memory never carries one tenant's data to another
// (DESIGN §6). Reuse within a team is not scrubbed (it is the same tenant).
//
// Where the bytes come from is a MemoryBackend: stream-ordered CUDA allocation on a real GPU, host
// memory with the same accounting on a simulated one.
//
// Streams: each lease runs its tasks on a stream of its own, taken from the pool's stream pool
// (created on demand, reused after the lease), so fractional tasks sharing a GPU run concurrently
// instead of queueing behind one another on a single stream. A block remembers the stream of the
// lease that allocated it; freeing it waits for that stream, so a block is never handed to
// another task (or scrubbed) while a kernel may still be using it.
//
// Thread-safe.
#ifndef GPUPOOL_RUNTIME_GPU_MEMORY_POOL_H_
#define GPUPOOL_RUNTIME_GPU_MEMORY_POOL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  virtual absl::StatusOr<void*> Allocate(uint64_t bytes) = 0;
  virtual void Free(void* ptr, uint64_t bytes) = 0;
  virtual absl::Status Zero(void* ptr, uint64_t bytes) = 0;
  virtual int cuda_device() const = 0;  // -1: host stand-in
  virtual void* stream() const = 0;     // cudaStream_t the pool orders its work on; nullptr: host
  // Streams for leases. The host stand-in has none: CreateStream returns nullptr, and
  // Synchronize(nullptr) returns at once.
  virtual absl::StatusOr<void*> CreateStream() = 0;
  virtual void DestroyStream(void* stream) = 0;
  virtual absl::Status Synchronize(void* stream) = 0;
};

// Host memory standing in for a simulated GPU's.
std::unique_ptr<MemoryBackend> MakeHostMemoryBackend();
// Stream-ordered device memory on CUDA device `cuda_device` (cudaMallocAsync on the device's
// default memory pool). Unavailable when the CUDA runtime cannot use the device.
absl::StatusOr<std::unique_ptr<MemoryBackend>> MakeCudaMemoryBackend(int cuda_device);
// The CUDA ordinal of the GPU at `pci_bus_id` ("00000000:18:00.0"): NVML and CUDA may number
// GPUs differently (CUDA_DEVICE_ORDER). -1 when CUDA cannot see it.
int CudaDeviceForPciBusId(const std::string& pci_bus_id);

class GpuMemoryPool;

// A lease's share of one GPU's memory. Shared by the lease and the blocks allocated under it,
// which may outlive the lease (a DeviceBuffer kept in the object store): hence counted ownership.
struct MemoryBudget {
  std::string team;
  std::string lease;
  uint64_t limit_bytes = 0;
  std::atomic<uint64_t> used_bytes{0};
  void* stream = nullptr;  // the lease's stream: blocks allocated under this budget are used on it
};

struct MemoryBlock {
  GpuMemoryPool* pool = nullptr;
  void* ptr = nullptr;
  uint64_t size = 0;       // as asked
  uint64_t capacity = 0;   // its size class
  std::shared_ptr<MemoryBudget> budget;  // shared: see MemoryBudget
  void* stream = nullptr;  // its lease's stream, waited for before the block is reused
};

class GpuMemoryPool {
 public:
  // `name` names the GPU in messages ("node-0/GPU 3"); `physical_bytes` is its memory.
  GpuMemoryPool(std::string name, uint64_t physical_bytes, std::unique_ptr<MemoryBackend> backend);
  ~GpuMemoryPool();

  // ResourceExhausted when the budget or the GPU itself has no room; names both figures.
  absl::StatusOr<MemoryBlock*> Allocate(const std::shared_ptr<MemoryBudget>& budget, uint64_t bytes);
  void Free(MemoryBlock* block);

  // A stream for one lease: an idle one, or a new one. Give it back with ReleaseStream, which
  // waits for the work queued on it. nullptr on the host stand-in.
  absl::StatusOr<void*> AcquireStream();
  void ReleaseStream(void* stream);
  size_t streams_created() const;

  uint64_t scrubbed_bytes() const { return scrubbed_.load(std::memory_order_relaxed); }
  uint64_t reserved_bytes() const;  // held from the backend, cached or in use
  const std::string& name() const { return name_; }
  int cuda_device() const { return backend_->cuda_device(); }
  void* stream() const { return backend_->stream(); }

  static uint64_t SizeClass(uint64_t bytes);

 private:
  struct CachedBlock {
    void* ptr;
    std::string last_team;
  };
  void TrimCache() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const uint64_t physical_bytes_;
  std::unique_ptr<MemoryBackend> backend_;
  std::atomic<uint64_t> scrubbed_{0};

  mutable Mutex mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::vector<CachedBlock>> cache_ ABSL_GUARDED_BY(mu_);  // by size class
  std::vector<void*> idle_streams_ ABSL_GUARDED_BY(mu_);
  std::vector<void*> all_streams_ ABSL_GUARDED_BY(mu_);  // destroyed with the pool
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_GPU_MEMORY_POOL_H_
