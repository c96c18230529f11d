// File: pool/scheduler/capacity.h
//
// The pool as the scheduler places into it, split in two so "what if" questions are cheap:
//   - PoolTopology: what never changes while the scheduler runs: every GPU's node, NVLink
//     island, model, quota group, labels and memory; nodes and islands as lists of GPUs.
//   - CapacityState: what does: per GPU, free compute (milli-GPUs) and memory (MiB), health, and
//     reservations; per node, free host CPU and memory. Plain values, so the preemption planner
//     and the gang predictor copy it.
//
// A whole-GPU slot needs an untouched GPU; fraction slots share a GPU within its compute and
// memory. Every slot also takes its host CPU and memory (SlotShape::cpu_milli, host_memory_mib)
// from its GPU's node, on nodes that declare them (InventoryNode: 0 means not counted). MIG and MPS slots are not placed by the scheduler yet (refused at submission).
// Gang reservations are held by request handles (PendingRequest sequence numbers, never 0); the
// room a preemption or move plan keeps for a request is taken out of the state (Share).
//
// Thread-compatible; owned by the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_CAPACITY_H_
#define GPUPOOL_POOL_SCHEDULER_CAPACITY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pool/config/scheduling_config.h"
#include "pool/inventory.h"
#include "pool/placement/model_set.h"
#include "pool/slot.h"

namespace gpupool::pool {

struct GpuStatic {
  GpuRef ref;
  int node = 0;     // index into PoolTopology::nodes()
  int island = 0;   // index into PoolTopology::islands()
  const GpuModel* model = nullptr;
  std::string model_name;  // the catalogue's name, or the device's own for a model it lacks
  std::string group;  // quota group of the model
  const std::map<std::string, std::string>* labels = nullptr;  // owned by the Inventory
  int64_t memory_total_mib = 0;
  bool has_nvlink = false;
};

class PoolTopology {
 public:
  // `inventory` must outlive this object (labels are referenced, not copied).
  PoolTopology(const Inventory& inventory, const SchedulingConfig& config);

  const std::vector<GpuStatic>& gpus() const { return gpus_; }
  const std::vector<std::vector<int>>& nodes() const { return node_gpus_; }
  const std::vector<std::vector<int>>& islands() const { return island_gpus_; }
  // Declared host capacity per node (0: not counted).
  int64_t node_cpu_milli(int node) const { return node_cpu_milli_[node]; }
  int64_t node_memory_mib(int node) const { return node_memory_mib_[node]; }
  int Find(const GpuRef& ref) const;  // position, or -1
  // Total capacity per quota group, in milli-GPUs (healthy or not): the cohort's size.
  std::map<std::string, int64_t> GroupCapacityMilli() const;
  // A catalogue model of the group (its GPUs share one quota, and MIG shares are computed
  // against it); nullptr for a group of GPUs the catalogue does not know.
  const GpuModel* GroupModel(const std::string& group) const;
  // Every model name of the pool (GpuStatic::model_name), as placement policies number them.
  const placement::ModelIndex& models() const { return models_; }
  // Whether some GPU of the pool is of this model (by GpuStatic::model_name, case-sensitive).
  bool HasModel(const std::string& name) const { return models_.Find(name).has_value(); }

 private:
  std::vector<GpuStatic> gpus_;
  std::vector<std::vector<int>> node_gpus_;
  std::vector<std::vector<int>> island_gpus_;
  std::vector<int64_t> node_cpu_milli_;
  std::vector<int64_t> node_memory_mib_;
  std::map<std::pair<std::string, int>, int> position_;  // (node, index) -> position
  std::map<std::string, const GpuModel*> group_model_;
  placement::ModelIndex models_;
};

// An amount of one GPU's capacity and of its node's host capacity: what a slot takes there, or
// the part of that a request's hold keeps for it (Scheduler::Hold). Host parts are 0 on a node
// that does not count them.
struct Share {
  int compute_milli = 0;
  int64_t memory_mib = 0;
  int64_t cpu_milli = 0;
  int64_t host_memory_mib = 0;

  bool empty() const { return compute_milli == 0 && memory_mib == 0 && cpu_milli == 0 && host_memory_mib == 0; }
  Share& operator+=(const Share& o);
  Share& operator-=(const Share& o);
};

struct GpuState {
  bool schedulable = true;
  int compute_free_milli = 1000;
  int64_t memory_free_mib = 0;
  uint64_t gang_reserved_for = 0;  // head-of-line gang reservation ...
  int64_t gang_reserved_until_s = 0;  // ... expected to start then: only earlier work backfills
};

class CapacityState {
 public:
  explicit CapacityState(const PoolTopology& topology);

  const GpuState& operator[](int g) const { return gpus_[g]; }
  GpuState& operator[](int g) { return gpus_[g]; }
  int size() const { return static_cast<int>(gpus_.size()); }

  bool Untouched(int g) const {
    return gpus_[g].compute_free_milli == 1000 && gpus_[g].memory_free_mib == memory_total_[g];
  }
  // Whether one slot of `shape` fits on GPU `g`, its GPU share and its host share on g's node
  // (ignores health and reservations: the placement filter checks those).
  bool Fits(int g, const SlotShape& shape) const;
  // Only the GPU share: whether it would fit if g's node had the host resources.
  bool GpuFits(int g, const SlotShape& shape) const;
  // Whether `count` slots' host shares fit on `node` (true on a node that declares none).
  bool HostFits(int node, const SlotShape& shape, int64_t count = 1) const;
  void Take(int g, const SlotShape& shape);
  void Give(int g, const SlotShape& shape);
  // What one slot of `shape` takes on GPU g and its node (host parts where the node counts them).
  Share ShareOf(int g, const SlotShape& shape) const;
  // The part of `want` that is free on g and its node now, part by part.
  Share FreePart(int g, const Share& want) const;
  // Take and give back an amount: `share` must be free (TakeShare) or taken (GiveShare).
  void TakeShare(int g, const Share& share);
  void GiveShare(int g, const Share& share);

  int node_of(int g) const { return node_of_[g]; }
  int node_count() const { return static_cast<int>(cpu_free_.size()); }
  // Free host capacity of a node; meaningful only where declared (HostCounted).
  int64_t cpu_free(int node) const { return cpu_free_[node]; }
  int64_t host_memory_free(int node) const { return host_memory_free_[node]; }
  bool cpu_counted(int node) const { return cpu_total_[node] > 0; }
  bool host_memory_counted(int node) const { return host_memory_total_[node] > 0; }

 private:
  std::vector<GpuState> gpus_;
  // Copied from the topology so copies stand alone.
  std::vector<int64_t> memory_total_;
  std::vector<int> node_of_;
  std::vector<int64_t> cpu_total_;
  std::vector<int64_t> host_memory_total_;
  // Per node.
  std::vector<int64_t> cpu_free_;
  std::vector<int64_t> host_memory_free_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_CAPACITY_H_
