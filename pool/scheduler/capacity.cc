#include "pool/scheduler/capacity.h"

#include <algorithm>
#include <cassert>

namespace gpupool::pool {

PoolTopology::PoolTopology(const Inventory& inventory, const SchedulingConfig& config) {
  std::map<std::string, int> island_index;
  for (size_t n = 0; n < inventory.nodes().size(); ++n) {
    node_gpus_.emplace_back();
    node_cpu_milli_.push_back(inventory.nodes()[n].cpu_milli);
    node_memory_mib_.push_back(inventory.nodes()[n].memory_mib);
    for (size_t position : inventory.nodes()[n].gpu_positions) {
      const InventoryGpu& gpu = inventory.gpus()[position];
      GpuStatic c;
      c.ref = gpu.ref;
      c.node = static_cast<int>(n);
      auto [it, inserted] =
          island_index.try_emplace(gpu.nvlink_island, static_cast<int>(island_gpus_.size()));
      if (inserted) island_gpus_.emplace_back();
      c.island = it->second;
      c.model = gpu.model;
      c.model_name = gpu.model != nullptr ? gpu.model->name : gpu.device.name;
      if (c.model_name.empty()) c.model_name = "unknown";
      c.group = config.GroupOf(c.model_name);
      // At most ModelIndex::kMaxModels names; a pool with more (none in practice) leaves the
      // rest unnamed, which only makes the policies' learned shapes coarser for them.
      (void)models_.Intern(c.model_name);
      c.labels = &gpu.labels;
      c.memory_total_mib = static_cast<int64_t>(gpu.device.memory_mib);
      c.has_nvlink = !gpu.device.nvlink_peers.empty();
      int g = static_cast<int>(gpus_.size());
      node_gpus_.back().push_back(g);
      island_gpus_[c.island].push_back(g);
      position_[{gpu.ref.node, gpu.ref.index}] = g;
      if (c.model != nullptr) group_model_.try_emplace(c.group, c.model);
      gpus_.push_back(std::move(c));
    }
  }
}

int PoolTopology::Find(const GpuRef& ref) const {
  auto it = position_.find({ref.node, ref.index});
  return it == position_.end() ? -1 : it->second;
}

std::map<std::string, int64_t> PoolTopology::GroupCapacityMilli() const {
  std::map<std::string, int64_t> out;
  for (const GpuStatic& c : gpus_) out[c.group] += 1000;
  return out;
}

const GpuModel* PoolTopology::GroupModel(const std::string& group) const {
  auto it = group_model_.find(group);
  return it == group_model_.end() ? nullptr : it->second;
}

Share& Share::operator+=(const Share& o) {
  compute_milli += o.compute_milli;
  memory_mib += o.memory_mib;
  cpu_milli += o.cpu_milli;
  host_memory_mib += o.host_memory_mib;
  return *this;
}

Share& Share::operator-=(const Share& o) {
  compute_milli -= o.compute_milli;
  memory_mib -= o.memory_mib;
  cpu_milli -= o.cpu_milli;
  host_memory_mib -= o.host_memory_mib;
  return *this;
}

CapacityState::CapacityState(const PoolTopology& topology) {
  for (const GpuStatic& c : topology.gpus()) {
    GpuState s;
    s.memory_free_mib = c.memory_total_mib;
    gpus_.push_back(s);
    memory_total_.push_back(c.memory_total_mib);
    node_of_.push_back(c.node);
  }
  for (size_t n = 0; n < topology.nodes().size(); ++n) {
    cpu_total_.push_back(topology.node_cpu_milli(static_cast<int>(n)));
    host_memory_total_.push_back(topology.node_memory_mib(static_cast<int>(n)));
  }
  cpu_free_ = cpu_total_;
  host_memory_free_ = host_memory_total_;
}

bool CapacityState::HostFits(int node, const SlotShape& shape, int64_t count) const {
  // Most requests ask for no host resources; placement asks this of every candidate GPU.
  if (shape.cpu_milli == 0 && shape.host_memory_mib == 0) return true;
  return (cpu_total_[node] <= 0 || cpu_free_[node] >= count * shape.cpu_milli) &&
         (host_memory_total_[node] <= 0 || host_memory_free_[node] >= count * shape.host_memory_mib);
}

bool CapacityState::Fits(int g, const SlotShape& shape) const {
  return HostFits(node_of_[g], shape) && GpuFits(g, shape);
}

bool CapacityState::GpuFits(int g, const SlotShape& shape) const {
  if (shape.kind == SlotKind::kWholeGpu) return Untouched(g);
  return gpus_[g].compute_free_milli >= SlotComputeMilli(shape) &&
         gpus_[g].memory_free_mib >= shape.memory_mib;
}

void CapacityState::Take(int g, const SlotShape& shape) {
  // The host share may overdraw a node (Scheduler::Adopt takes running leases back as they are).
  assert(GpuFits(g, shape));
  TakeShare(g, ShareOf(g, shape));
}

void CapacityState::Give(int g, const SlotShape& shape) { GiveShare(g, ShareOf(g, shape)); }

Share CapacityState::ShareOf(int g, const SlotShape& shape) const {
  const int node = node_of_[g];
  return {.compute_milli = SlotComputeMilli(shape),
          .memory_mib = shape.kind == SlotKind::kWholeGpu ? memory_total_[g] : shape.memory_mib,
          .cpu_milli = cpu_total_[node] > 0 ? shape.cpu_milli : 0,
          .host_memory_mib = host_memory_total_[node] > 0 ? shape.host_memory_mib : 0};
}

Share CapacityState::FreePart(int g, const Share& want) const {
  const int node = node_of_[g];
  const auto part = [](auto wanted, auto free) { return std::max<decltype(wanted)>(0, std::min<decltype(wanted)>(wanted, free)); };
  return {.compute_milli = part(want.compute_milli, gpus_[g].compute_free_milli),
          .memory_mib = part(want.memory_mib, gpus_[g].memory_free_mib),
          .cpu_milli = cpu_total_[node] > 0 ? part(want.cpu_milli, cpu_free_[node]) : 0,
          .host_memory_mib = host_memory_total_[node] > 0 ? part(want.host_memory_mib, host_memory_free_[node]) : 0};
}

void CapacityState::TakeShare(int g, const Share& share) {
  const int node = node_of_[g];
  gpus_[g].compute_free_milli -= share.compute_milli;
  gpus_[g].memory_free_mib -= share.memory_mib;
  cpu_free_[node] -= share.cpu_milli;
  host_memory_free_[node] -= share.host_memory_mib;
  assert(gpus_[g].compute_free_milli >= 0 && gpus_[g].memory_free_mib >= 0);
}

void CapacityState::GiveShare(int g, const Share& share) {
  const int node = node_of_[g];
  gpus_[g].compute_free_milli += share.compute_milli;
  gpus_[g].memory_free_mib += share.memory_mib;
  cpu_free_[node] += share.cpu_milli;
  host_memory_free_[node] += share.host_memory_mib;
  assert(gpus_[g].compute_free_milli <= 1000 && gpus_[g].memory_free_mib <= memory_total_[g]);
  assert(cpu_free_[node] <= cpu_total_[node] && host_memory_free_[node] <= host_memory_total_[node]);
}

}  // namespace gpupool::pool
