// File: pool/placement/fragmentation_model.h
//
// gpupool's measure of how fragmented a node is: the GPU capacity (milli-GPUs) that the expected
// workload could not use, averaged over the workload's task shapes. It extends FGD's measure
// (fgd_fragmentation.h) in two ways that matter on real clusters:
//
//  * Memory counts like CPU: a GPU is stranded when its node lacks the CPU *or* the memory a task
//    needs, not only the GPU share.
//  * Two horizons are averaged. FGD's "next task" view asks whether one more task of shape m fits
//    and counts the GPUs it could not use. The "fill" view asks how much of the node's free GPU
//    capacity tasks of shape m could take if the node were filled with them, as CPU, memory and
//    per-GPU shares allow: a node with 2 free GPUs but CPU for one 11-core task has 1 GPU that is
//    already lost, which the next-task view only sees once the first task has landed. The next-task
//    view keeps FGD's sharp preference for exact complements on a GPU; the fill view stops CPU- and
//    memory-heavy tasks from eating the CPU that GPU-dense nodes need.
//
//   FragmentationModel model(distribution);
//   double before = model.Unusable(model_id, cpu_free, memory_free, gpu_free);
#ifndef GPUPOOL_POOL_PLACEMENT_FRAGMENTATION_MODEL_H_
#define GPUPOOL_POOL_PLACEMENT_FRAGMENTATION_MODEL_H_

#include <cstdint>
#include <span>
#include <vector>

#include "pool/placement/model_set.h"
#include "pool/placement/shape_distribution.h"

namespace gpupool::pool::placement {

class FragmentationModel {
 public:
  // Uses the GPU shapes of `workload` (CPU-only shapes see every node's GPUs alike and are
  // dropped), renormalised. `fill_weight` in [0, 1] weighs the fill view against the next-task view.
  explicit FragmentationModel(const ShapeDistribution& workload, double fill_weight = 0.5);

  // Expected unusable free GPU capacity of a node in this state, in milli-GPUs.
  double Unusable(int model_id, int64_t cpu_free, int64_t memory_free,
                  std::span<const int16_t> gpu_free) const;

  bool empty() const { return shapes_.empty(); }

 private:
  struct Shape {
    int64_t cpu_milli;
    int64_t memory_mib;
    int group;  // index into groups_
    ModelSet models;
    double probability;
  };
  // Shapes that ask the same per-GPU share and GPU count see a node's GPUs the same way; the GPU
  // scan is done once per group.
  struct Group {
    int gpu_milli;
    int num_gpu;
  };
  struct GroupView {
    int fitting;        // GPUs with at least gpu_milli free
    int64_t fit_free;   // their free capacity
    int64_t slots;      // tasks the GPUs alone could take if filled
  };

  double fill_weight_;
  std::vector<Group> groups_;
  std::vector<Shape> shapes_;
  mutable std::vector<GroupView> scratch_;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_FRAGMENTATION_MODEL_H_
