// File: pool/scheduler/capacity.h
//
// The free capacity of every GPU in the pool, in the units the scheduler places: milli-GPUs of
// compute and MiB of memory, plus whether the GPU is schedulable (health) and whether a pending
// request holds a reservation on it. Built once from the Inventory; the scheduler takes and gives
// back slots as leases start and end.
//
// A whole-GPU slot needs an untouched GPU; fraction slots share a GPU within its compute and
// memory. MIG and MPS slots are placed by GpuSlots once the scheduler carves them (not yet: the
// scheduler refuses them at submission with Unimplemented).
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
#include "pool/slot.h"

namespace gpupool::pool {

struct GpuCapacity {
  // Constant after construction.
  GpuRef ref;
  int node = 0;     // index into Capacity::nodes()
  int island = 0;   // index into Capacity::islands()
  const GpuModel* model = nullptr;
  std::string group;  // quota group of the model
  const std::map<std::string, std::string>* labels = nullptr;  // owned by the Inventory
  int64_t memory_total_mib = 0;
  bool has_nvlink = false;

  // Changing.
  bool schedulable = true;
  int compute_free_milli = 1000;
  int64_t memory_free_mib = 0;
  std::string reserved_for;  // request a preemption freed this GPU for; empty when none
  // Head-of-line gang reservation: the gang expects to start here at `gang_reserved_until_s`;
  // others may backfill only with work whose runtime estimate ends by then.
  std::string gang_reserved_for;
  int64_t gang_reserved_until_s = 0;

  bool untouched() const {
    return compute_free_milli == 1000 && memory_free_mib == memory_total_mib;
  }
};

class Capacity {
 public:
  // `inventory` must outlive this object (labels are referenced, not copied).
  Capacity(const Inventory& inventory, const SchedulingConfig& config);

  std::vector<GpuCapacity>& gpus() { return gpus_; }
  const std::vector<GpuCapacity>& gpus() const { return gpus_; }
  const std::vector<std::vector<int>>& nodes() const { return node_gpus_; }
  const std::vector<std::vector<int>>& islands() const { return island_gpus_; }
  int Find(const GpuRef& ref) const;  // position, or -1

  // Whether one slot of `shape` fits on GPU `g` now (ignores health and reservations; the
  // placement filter checks those).
  bool Fits(int g, const SlotShape& shape) const;
  void Take(int g, const SlotShape& shape);
  void Give(int g, const SlotShape& shape);

  // Total capacity per quota group, in milli-GPUs (healthy or not): the cohort's size.
  std::map<std::string, int64_t> GroupCapacityMilli() const;

 private:
  std::vector<GpuCapacity> gpus_;
  std::vector<std::vector<int>> node_gpus_;
  std::vector<std::vector<int>> island_gpus_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_CAPACITY_H_
