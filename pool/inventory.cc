#include "absl/strings/string_view.h"
#include "pool/inventory.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace gpupool::pool {
namespace {

absl::StatusOr<MigLayout> RebuildMigLayout(const GpuModel& model, const DiscoveredGpu& gpu,
                                           absl::string_view where) {
  MigLayout layout(model);
  for (const GpuInstanceInfo& gi : gpu.instances) {
    const MigProfile* profile = model.FindMigProfile(gi.profile);
    if (profile == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": MIG instance ", gi.id,
                                                     " has profile '", gi.profile,
                                                     "' unknown for ", model.name));
    }
    if (absl::Status s = layout.Add(*profile, gi.start); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  }
  return layout;
}

}  // namespace

absl::StatusOr<Inventory> Inventory::FromDiscovery(const std::vector<DiscoveredNode>& nodes) {
  Inventory inv;
  std::set<std::string> node_names;
  for (const DiscoveredNode& node : nodes) {
    if (node.name.empty()) return absl::InvalidArgumentError("a node has an empty name");
    if (!node_names.insert(node.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("node name '", node.name, "' is used twice"));
    }
    if (node.cpu_milli < 0 || node.memory_mib < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", node.name, ": host CPU and memory cannot be negative"));
    }
    InventoryNode inode{node.name, node.labels, {}, node.cpu_milli, node.memory_mib};
    std::set<int> indices;
    for (const DiscoveredGpu& device : node.gpus) {
      std::string where = absl::StrCat("node ", node.name, " GPU ", device.index);
      if (!indices.insert(device.index).second) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": GPU index is used twice"));
      }
      InventoryGpu gpu;
      gpu.ref = {node.name, device.index};
      gpu.device = device;
      gpu.model = FindGpuModel(device.model);
      gpu.health = device.health;
      gpu.nvlink_island = absl::StrCat(
          node.name, "/", device.nvlink_island.empty() ? absl::StrCat("gpu", device.index)
                                                      : device.nvlink_island);
      if (gpu.model != nullptr && device.mig_mode == MigMode::kEnabled) {
        absl::StatusOr<MigLayout> layout = RebuildMigLayout(*gpu.model, device, where);
        if (!layout.ok()) return layout.status();
        gpu.mig_layout = *std::move(layout);
      }
      // Node labels first, then the GPU's own, then the built-in ones, which always win.
      gpu.labels = node.labels;
      for (const auto& [k, v] : device.labels) gpu.labels[k] = v;
      gpu.labels["model"] = gpu.model ? gpu.model->name : device.name;
      gpu.labels["memory"] = absl::StrCat((device.memory_mib + 1023) / 1024, "GB");
      gpu.labels["nvlink-island"] = gpu.nvlink_island;
      gpu.labels["node"] = node.name;
      inode.gpu_positions.push_back(inv.gpus_.size());
      inv.gpus_.push_back(std::move(gpu));
    }
    inv.node_index_[node.name] = inv.nodes_.size();
    inv.nodes_.push_back(std::move(inode));
  }
  return inv;
}

const InventoryGpu* Inventory::Find(const GpuRef& ref) const {
  // By node, then among its few GPUs: a scan of every GPU made the scheduler's construction
  // quadratic in the pool's size (seconds at 20,000 GPUs).
  auto node = node_index_.find(ref.node);
  if (node == node_index_.end()) return nullptr;
  for (size_t position : nodes_[node->second].gpu_positions) {
    if (gpus_[position].ref.index == ref.index) return &gpus_[position];
  }
  return nullptr;
}

InventoryGpu* Inventory::FindMutable(const GpuRef& ref) {
  return const_cast<InventoryGpu*>(static_cast<const Inventory*>(this)->Find(ref));
}

bool Inventory::SameNvLinkIsland(const GpuRef& a, const GpuRef& b) const {
  const InventoryGpu* ga = Find(a);
  const InventoryGpu* gb = Find(b);
  return ga != nullptr && gb != nullptr && ga->nvlink_island == gb->nvlink_island;
}

std::vector<const InventoryGpu*> Inventory::Select(
    const std::map<std::string, std::string>& selector) const {
  std::vector<const InventoryGpu*> out;
  for (const InventoryGpu& gpu : gpus_) {
    bool match = true;
    for (const auto& [k, v] : selector) {
      auto it = gpu.labels.find(k);
      if (it == gpu.labels.end() || it->second != v) {
        match = false;
        break;
      }
    }
    if (match) out.push_back(&gpu);
  }
  return out;
}

absl::Status Inventory::SetHealth(const GpuRef& ref, const HealthVerdict& verdict) {
  InventoryGpu* gpu = FindMutable(ref);
  if (gpu == nullptr) {
    return absl::NotFoundError(absl::StrCat("no GPU ", ref.index, " on node ", ref.node));
  }
  gpu->health = verdict.state;
  gpu->health_reasons = verdict.reasons;
  return absl::OkStatus();
}

}  // namespace gpupool::pool
