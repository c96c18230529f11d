// File: pool/inventory.h
//
// The pool as the scheduler sees it: nodes, their GPUs, each GPU's labels, NVLink island, MIG
// layout and health. Built from what a DeviceDriver discovered; the scheduler and the CLI read it.
//
// Every GPU carries these labels (plus any the configuration adds), so affinity rules can name
// them: "model" (catalogue name, or the driver's name for GPUs the catalogue lacks), "memory"
// ("80GB"), "nvlink-island" ("node-0/nvl0": unique across the pool), "node", and "rack" when
// the node has one.
//
//   absl::StatusOr<Inventory> inv = Inventory::FromDiscovery(driver->Discover().value());
//   for (const InventoryGpu& gpu : inv->gpus()) { ... }
//   bool fast = inv->SameNvLinkIsland(a, b);
//
// Thread-compatible.
#ifndef GPUPOOL_POOL_INVENTORY_H_
#define GPUPOOL_POOL_INVENTORY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/devices/device_driver.h"
#include "pool/gpu_catalogue.h"
#include "pool/health.h"
#include "pool/mig_layout.h"

namespace gpupool::pool {

struct InventoryGpu {
  GpuRef ref;
  DiscoveredGpu device;                  // as the driver reported it
  const GpuModel* model = nullptr;       // nullptr when the catalogue does not know the GPU
  std::optional<MigLayout> mig_layout;   // present when MIG is enabled and the model is known
  std::string nvlink_island;             // pool-wide island id
  std::map<std::string, std::string> labels;
  HealthState health = HealthState::kHealthy;
  std::vector<std::string> health_reasons;

  bool schedulable() const {
    return health == HealthState::kHealthy || health == HealthState::kDegraded;
  }
};

struct InventoryNode {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<size_t> gpu_positions;  // into Inventory::gpus()
  int64_t cpu_milli = 0;   // as DiscoveredNode: 0 = not declared, not counted
  int64_t memory_mib = 0;
};

class Inventory {
 public:
  // Validates what was discovered: unique node names, unique GPU indices per node, MIG instances
  // that obey the model's placement rules. Errors name the node, GPU and problem.
  static absl::StatusOr<Inventory> FromDiscovery(const std::vector<DiscoveredNode>& nodes);

  const std::vector<InventoryNode>& nodes() const { return nodes_; }
  const std::vector<InventoryGpu>& gpus() const { return gpus_; }
  const InventoryGpu* Find(const GpuRef& ref) const;
  int gpu_count() const { return static_cast<int>(gpus_.size()); }

  bool SameNvLinkIsland(const GpuRef& a, const GpuRef& b) const;
  // GPUs whose labels contain every (key, value) of `selector`.
  std::vector<const InventoryGpu*> Select(const std::map<std::string, std::string>& selector) const;

  // Records a health verdict (from AssessHealth); NotFound for an unknown GPU.
  absl::Status SetHealth(const GpuRef& ref, const HealthVerdict& verdict);

 private:
  InventoryGpu* FindMutable(const GpuRef& ref);

  std::vector<InventoryNode> nodes_;
  std::vector<InventoryGpu> gpus_;
  std::map<std::string, size_t> node_index_;  // node name -> position in nodes_
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_INVENTORY_H_
