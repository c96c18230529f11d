// File: runtime/tasks/local_gpus.h
//
// The GPUs this process runs tasks on (its part of the pool's inventory) and one device memory
// pool per GPU, from which tasks allocate under their lease's budget.
//
// Owned by JobRuntime. Discovered first (Discover), memory pools opened once the rest of the
// runtime stands (OpenMemoryPools), both in JobRuntime::Start; constant after that, so every
// method may be called from any thread without a lock. Callers: TaskShapes (the smallest GPU a
// fraction may land on), LeaseManager (a granted lease's slots), JobRuntime (MemoryPoolFor, Stats).
#ifndef GPUPOOL_RUNTIME_TASKS_LOCAL_GPUS_H_
#define GPUPOOL_RUNTIME_TASKS_LOCAL_GPUS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pool/devices/device_driver.h"
#include "runtime/gpu/memory_pool.h"
#include "runtime/tasks/lease_run.h"

namespace gpupool::runtime {

class LocalGpus {
 public:
  static absl::StatusOr<std::unique_ptr<LocalGpus>> Discover(const std::vector<pool::DiscoveredNode>& nodes);

  // One pool per GPU: CUDA memory when `cuda` (the "nvidia" driver), else host memory. Fails
  // (kUnavailable) when CUDA does not see one of the GPUs. Called once, before any lease.
  absl::Status OpenMemoryPools(bool cuda);

  const pool::Inventory& inventory() const { return inventory_; }
  // Whether every GPU of the lease is this process's (else its tasks run in a worker elsewhere).
  bool Holds(const pool::Lease& lease) const;
  // Null for a GPU that is not this process's.
  GpuMemoryPool* MemoryPoolFor(const pool::GpuRef& gpu) const;
  // Fills in what a run of `lease` needs from its GPUs: slots, location, compute share, and for
  // each slot its GPU's memory pool, a budget and a stream of its own (shared when none is free).
  void Describe(const pool::Lease& lease, LeaseRun& run) const;
  uint64_t scrubbed_bytes() const;

 private:
  explicit LocalGpus(pool::Inventory inventory) : inventory_(std::move(inventory)) {}

  const pool::Inventory inventory_;
  std::map<std::string, std::unique_ptr<GpuMemoryPool>> memory_pools_;  // "node/index"; fixed after OpenMemoryPools
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_LOCAL_GPUS_H_
