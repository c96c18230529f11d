#include "runtime/service/gpu_health_book.h"

namespace gpupool::runtime {

GpuHealthBook::GpuHealthBook(const pool::Inventory& inventory, pool::HealthPolicy policy, double now_s) {
  for (const pool::InventoryGpu& gpu : inventory.gpus()) {
    machines_.emplace(std::make_pair(gpu.ref.node, gpu.ref.index), pool::GpuHealthMachine(policy, now_s));
  }
}

pool::GpuHealthMachine* GpuHealthBook::Find(const pool::GpuRef& gpu) {
  auto it = machines_.find({gpu.node, gpu.index});
  return it == machines_.end() ? nullptr : &it->second;
}

const pool::GpuHealthMachine* GpuHealthBook::Find(const pool::GpuRef& gpu) const {
  auto it = machines_.find({gpu.node, gpu.index});
  return it == machines_.end() ? nullptr : &it->second;
}

std::vector<pool::GpuRef> GpuHealthBook::Draining() const {
  std::vector<pool::GpuRef> out;
  for (const auto& [key, m] : machines_) {
    if (m.state() == pool::HealthState::kDraining) out.push_back(pool::GpuRef{key.first, key.second});
  }
  return out;
}

}  // namespace gpupool::runtime
