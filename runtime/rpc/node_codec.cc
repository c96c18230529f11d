#include "runtime/rpc/node_codec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gpupool/pool_description.h"
#include "pool/health.h"
#include "runtime/rpc/inventory_codec.h"

namespace gpupool::rpc {
namespace {

pool::DiscoveredGpu FromWire(const GpuInfo& g) {
  pool::DiscoveredGpu d;
  d.index = g.index;
  d.model = g.model;
  d.name = g.name;
  d.uuid = g.uuid;
  d.memory_mib = g.memory_mib;
  d.compute_capability_major = g.compute_capability_major;
  d.compute_capability_minor = g.compute_capability_minor;
  d.sm_count = g.sm_count;
  d.mig_mode = ToPool(g.mig_mode);
  for (const MigInstance& mi : g.instances) {
    pool::GpuInstanceInfo gi;
    gi.id = mi.id;
    gi.profile = mi.profile;
    gi.start = mi.start;
    gi.size = mi.size;
    gi.uuid = mi.uuid;
    for (const ComputeInstance& ci : mi.compute_instances) {
      pool::ComputeInstanceInfo c;
      c.id = ci.id;
      c.profile = ci.profile;
      gi.compute_instances.push_back(std::move(c));
    }
    d.instances.push_back(std::move(gi));
  }
  d.nvlink_island = g.nvlink_island;
  d.pci_bus_id = g.pci_bus_id;
  d.numa_node = g.numa_node;
  d.health = ToPool(g.health);
  d.labels = g.labels;
  return d;
}

}  // namespace

gpupool::MigMode FromPool(pool::MigMode mode) {
  switch (mode) {
    case pool::MigMode::kUnsupported: return gpupool::MigMode::kUnsupported;
    case pool::MigMode::kDisabled: return gpupool::MigMode::kDisabled;
    case pool::MigMode::kEnabled: return gpupool::MigMode::kEnabled;
  }
  return gpupool::MigMode::kUnsupported;
}

pool::MigMode ToPool(gpupool::MigMode mode) {
  switch (mode) {
    case gpupool::MigMode::kUnsupported: return pool::MigMode::kUnsupported;
    case gpupool::MigMode::kDisabled: return pool::MigMode::kDisabled;
    case gpupool::MigMode::kEnabled: return pool::MigMode::kEnabled;
  }
  return pool::MigMode::kUnsupported;
}

gpupool::HealthState FromPool(pool::HealthState state) {
  switch (state) {
    case pool::HealthState::kHealthy: return gpupool::HealthState::kHealthy;
    case pool::HealthState::kDegraded: return gpupool::HealthState::kDegraded;
    case pool::HealthState::kDraining: return gpupool::HealthState::kDraining;
    case pool::HealthState::kQuarantined: return gpupool::HealthState::kQuarantined;
    case pool::HealthState::kFailed: return gpupool::HealthState::kFailed;
    case pool::HealthState::kLost: return gpupool::HealthState::kLost;
  }
  return gpupool::HealthState::kLost;
}

pool::HealthState ToPool(gpupool::HealthState state) {
  switch (state) {
    case gpupool::HealthState::kHealthy: return pool::HealthState::kHealthy;
    case gpupool::HealthState::kDegraded: return pool::HealthState::kDegraded;
    case gpupool::HealthState::kDraining: return pool::HealthState::kDraining;
    case gpupool::HealthState::kQuarantined: return pool::HealthState::kQuarantined;
    case gpupool::HealthState::kFailed: return pool::HealthState::kFailed;
    case gpupool::HealthState::kLost: return pool::HealthState::kLost;
  }
  return pool::HealthState::kLost;
}

// Only what a DiscoveredGpu has travels; NVLink peers are summarised by the island, which is
// what the scheduler places by.
GpuInfo GpuInfoOf(const pool::DiscoveredGpu& d) {
  GpuInfo g;
  g.index = d.index;
  g.model = d.model;
  g.name = d.name;
  g.uuid = d.uuid;
  g.memory_mib = d.memory_mib;
  g.compute_capability_major = d.compute_capability_major;
  g.compute_capability_minor = d.compute_capability_minor;
  g.sm_count = d.sm_count;
  g.mig_mode = FromPool(d.mig_mode);
  for (const pool::GpuInstanceInfo& gi : d.instances) {
    MigInstance mi{gi.id, gi.profile, gi.start, gi.size, gi.uuid, {}};
    for (const pool::ComputeInstanceInfo& ci : gi.compute_instances) mi.compute_instances.push_back({ci.id, ci.profile});
    g.instances.push_back(std::move(mi));
  }
  g.nvlink_island = d.nvlink_island;  // the node-local island, as discovered
  g.pci_bus_id = d.pci_bus_id;
  g.numa_node = d.numa_node;
  g.health = FromPool(d.health);
  g.labels = d.labels;
  return g;
}

std::string EncodeNodes(const DiscoveredPool& pool) {
  PoolDescription wire;
  wire.driver = pool.driver;
  for (const pool::DiscoveredNode& node : pool.nodes) {
    NodeInfo info{node.name, node.labels, {}};
    for (const pool::DiscoveredGpu& gpu : node.gpus) info.gpus.push_back(GpuInfoOf(gpu));
    wire.nodes.push_back(std::move(info));
  }
  return EncodeInventory(wire);
}

absl::StatusOr<DiscoveredPool> DecodeNodes(absl::string_view bytes) {
  absl::StatusOr<PoolDescription> wire = DecodeInventory(bytes);
  if (!wire.ok()) return wire.status();
  DiscoveredPool out;
  out.driver = wire->driver;
  for (const NodeInfo& info : wire->nodes) {
    if (info.name.empty()) return absl::InvalidArgumentError("a node without a name");
    pool::DiscoveredNode node{info.name, info.labels, {}};
    for (const GpuInfo& gpu : info.gpus) node.gpus.push_back(FromWire(gpu));
    out.nodes.push_back(std::move(node));
  }
  return out;
}

std::vector<pool::DiscoveredNode> DiscoveredNodes(const pool::Inventory& inventory, const std::string& only) {
  std::vector<pool::DiscoveredNode> out;
  for (const pool::InventoryNode& node : inventory.nodes()) {
    if (!only.empty() && node.name != only) continue;
    pool::DiscoveredNode d{node.name, node.labels, {}};
    for (size_t position : node.gpu_positions) d.gpus.push_back(inventory.gpus()[position].device);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace gpupool::rpc
