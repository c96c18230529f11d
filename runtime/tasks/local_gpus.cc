// File: runtime/tasks/local_gpus.cc
#include "runtime/tasks/local_gpus.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::runtime {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string GpuKey(const pool::GpuRef& ref) { return absl::StrCat(ref.node, "/", ref.index); }

}  // namespace

absl::StatusOr<std::unique_ptr<LocalGpus>> LocalGpus::Discover(const std::vector<pool::DiscoveredNode>& nodes) {
  absl::StatusOr<pool::Inventory> local = pool::Inventory::FromDiscovery(nodes);
  if (!local.ok()) return local.status();
  return std::unique_ptr<LocalGpus>(new LocalGpus(*std::move(local)));
}

absl::Status LocalGpus::OpenMemoryPools(bool cuda) {
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
    std::unique_ptr<MemoryBackend> backend;
    if (cuda) {
      int device = CudaDeviceForPciBusId(gpu.device.pci_bus_id);
      absl::StatusOr<std::unique_ptr<MemoryBackend>> made =
          device >= 0 ? MakeCudaMemoryBackend(device)
                      : absl::StatusOr<std::unique_ptr<MemoryBackend>>(absl::UnavailableError(
                            absl::StrCat("CUDA does not see ", gpu.device.pci_bus_id)));
      if (!made.ok()) return made.status();
      backend = *std::move(made);
    } else {
      backend = MakeHostMemoryBackend();
    }
    memory_pools_[GpuKey(gpu.ref)] = std::make_unique<GpuMemoryPool>(
        absl::StrCat(gpu.ref.node, "/GPU ", gpu.ref.index), gpu.device.memory_mib * kMiB,
        std::move(backend));
  }
  return absl::OkStatus();
}

GpuMemoryPool* LocalGpus::MemoryPoolFor(const pool::GpuRef& gpu) const {
  auto it = memory_pools_.find(GpuKey(gpu));
  return it == memory_pools_.end() ? nullptr : it->second.get();
}

bool LocalGpus::Holds(const pool::Lease& lease) const {
  for (const pool::GpuRef& ref : lease.gpus) {
    if (inventory_.Find(ref) == nullptr) return false;
  }
  return true;
}

void LocalGpus::Describe(const pool::Lease& lease, LeaseRun& run) const {
  std::vector<std::string> places;
  const pool::SlotShape& slot = lease.request.slot;
  for (const pool::GpuRef& ref : lease.gpus) {
    const pool::InventoryGpu* gpu = inventory_.Find(ref);
    GpuMemoryPool* memory = MemoryPoolFor(ref);
    SlotInfo info;
    info.node = ref.node;
    info.gpu_index = ref.index;
    info.model = gpu != nullptr ? gpu->device.model : "";
    info.cuda_device = memory != nullptr ? memory->cuda_device() : -1;
    info.kind = std::string(pool::SlotKindName(slot.kind));
    info.compute_milli = pool::SlotComputeMilli(slot, gpu != nullptr ? gpu->model : nullptr);
    uint64_t gpu_bytes = gpu != nullptr ? gpu->device.memory_mib * kMiB : 0;
    info.memory_budget_bytes =
        slot.kind == pool::SlotKind::kFraction ? static_cast<uint64_t>(slot.memory_mib) * kMiB : gpu_bytes;
    run.slots.push_back(info);
    places.push_back(absl::StrCat(ref.node, "/GPU ", ref.index));
  }
  run.location = absl::StrJoin(places, "+");
  run.gpus = static_cast<double>(lease.milli) / 1000.0;
  for (size_t i = 0; i < lease.gpus.size(); ++i) {
    SlotMemory m;
    m.pool = MemoryPoolFor(lease.gpus[i]);
    m.budget = std::make_shared<MemoryBudget>();
    m.budget->team = lease.request.team;
    m.budget->lease = lease.id;
    m.budget->limit_bytes = run.slots[i].memory_budget_bytes;
    if (m.pool != nullptr) {
      absl::StatusOr<void*> stream = m.pool->AcquireStream();
      // Without a stream of its own the lease shares the pool's: slower, never wrong.
      m.stream = stream.ok() ? *stream : nullptr;
      m.budget->stream = m.stream;
    }
    run.memory.push_back(std::move(m));
  }
}

uint64_t LocalGpus::scrubbed_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [key, memory] : memory_pools_) bytes += memory->scrubbed_bytes();
  return bytes;
}

}  // namespace gpupool::runtime
