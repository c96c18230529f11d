#include "pool/scheduler/capacity.h"

#include <cassert>

namespace gpupool::pool {
namespace {

int64_t MemoryOf(const SlotShape& shape, int64_t gpu_total) {
  return shape.kind == SlotKind::kWholeGpu ? gpu_total : shape.memory_mib;
}

int ComputeOf(const SlotShape& shape) {
  switch (shape.kind) {
    case SlotKind::kWholeGpu: return 1000;
    case SlotKind::kFraction: return shape.compute_milli;
    case SlotKind::kMps: return shape.mps_thread_percentage * 10;
    case SlotKind::kMig: return 1000;  // not placed here (refused at submission)
  }
  return 1000;
}

}  // namespace

Capacity::Capacity(const Inventory& inventory, const SchedulingConfig& config) {
  std::map<std::string, int> island_index;
  for (size_t n = 0; n < inventory.nodes().size(); ++n) {
    node_gpus_.emplace_back();
    for (size_t position : inventory.nodes()[n].gpu_positions) {
      const InventoryGpu& gpu = inventory.gpus()[position];
      GpuCapacity c;
      c.ref = gpu.ref;
      c.node = static_cast<int>(n);
      auto [it, inserted] = island_index.try_emplace(gpu.nvlink_island, static_cast<int>(island_gpus_.size()));
      if (inserted) island_gpus_.emplace_back();
      c.island = it->second;
      c.model = gpu.model;
      c.group = config.GroupOf(gpu.model != nullptr ? gpu.model->name : gpu.device.name);
      c.labels = &gpu.labels;
      c.memory_total_mib = static_cast<int64_t>(gpu.device.memory_mib);
      c.memory_free_mib = c.memory_total_mib;
      c.has_nvlink = !gpu.device.nvlink_peers.empty();
      c.schedulable = gpu.schedulable();
      int g = static_cast<int>(gpus_.size());
      node_gpus_.back().push_back(g);
      island_gpus_[c.island].push_back(g);
      gpus_.push_back(std::move(c));
    }
  }
}

int Capacity::Find(const GpuRef& ref) const {
  for (size_t g = 0; g < gpus_.size(); ++g) {
    if (gpus_[g].ref == ref) return static_cast<int>(g);
  }
  return -1;
}

bool Capacity::Fits(int g, const SlotShape& shape) const {
  const GpuCapacity& c = gpus_[g];
  if (shape.kind == SlotKind::kWholeGpu) return c.untouched();
  return c.compute_free_milli >= ComputeOf(shape) && c.memory_free_mib >= shape.memory_mib;
}

void Capacity::Take(int g, const SlotShape& shape) {
  GpuCapacity& c = gpus_[g];
  assert(Fits(g, shape));
  c.compute_free_milli -= ComputeOf(shape);
  c.memory_free_mib -= MemoryOf(shape, c.memory_total_mib);
}

void Capacity::Give(int g, const SlotShape& shape) {
  GpuCapacity& c = gpus_[g];
  c.compute_free_milli += ComputeOf(shape);
  c.memory_free_mib += MemoryOf(shape, c.memory_total_mib);
  assert(c.compute_free_milli <= 1000 && c.memory_free_mib <= c.memory_total_mib);
}

std::map<std::string, int64_t> Capacity::GroupCapacityMilli() const {
  std::map<std::string, int64_t> out;
  for (const GpuCapacity& c : gpus_) out[c.group] += 1000;
  return out;
}

}  // namespace gpupool::pool
