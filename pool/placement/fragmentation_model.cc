#include "pool/placement/fragmentation_model.h"

#include <algorithm>

namespace gpupool::pool::placement {

FragmentationModel::FragmentationModel(const ShapeDistribution& workload, double fill_weight)
    : fill_weight_(fill_weight) {
  double total = 0;
  for (const TaskShape& s : workload.shapes()) {
    if (s.num_gpu == 0 || s.gpu_milli <= 0) continue;
    int group = -1;
    for (int g = 0; g < static_cast<int>(groups_.size()); ++g) {
      if (groups_[g].gpu_milli == s.gpu_milli && groups_[g].num_gpu == s.num_gpu) group = g;
    }
    if (group < 0) {
      group = static_cast<int>(groups_.size());
      groups_.push_back(Group{s.gpu_milli, s.num_gpu});
    }
    shapes_.push_back(Shape{s.cpu_milli, s.memory_mib, group, s.models, s.probability});
    total += s.probability;
  }
  if (total > 0) {
    for (Shape& s : shapes_) s.probability /= total;
  }
  scratch_.resize(groups_.size());
}

double FragmentationModel::Unusable(int model_id, int64_t cpu_free, int64_t memory_free,
                                    std::span<const int16_t> gpu_free) const {
  int64_t total_free = 0;
  for (int16_t f : gpu_free) total_free += f;
  if (total_free == 0) return 0;

  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    GroupView& v = scratch_[g];
    v = GroupView{0, 0, 0};
    for (int16_t f : gpu_free) {
      if (f < group.gpu_milli) continue;
      ++v.fitting;
      v.fit_free += f;
      v.slots += f / group.gpu_milli;
    }
    // Multi-GPU tasks take whole GPUs of one node: each needs num_gpu fitting GPUs.
    if (group.num_gpu > 1) v.slots = v.fitting / group.num_gpu;
  }

  double next_task_usable = 0;
  double fill_usable = 0;
  for (const Shape& s : shapes_) {
    if (!s.models.Allows(model_id)) continue;
    const Group& group = groups_[s.group];
    const GroupView& v = scratch_[s.group];
    if (v.fitting < group.num_gpu) continue;
    int64_t tasks = v.slots;
    if (s.cpu_milli > 0) tasks = std::min(tasks, cpu_free / s.cpu_milli);
    if (s.memory_mib > 0) tasks = std::min(tasks, memory_free / s.memory_mib);
    if (tasks == 0) continue;  // the node cannot host even one: nothing is usable by this shape
    next_task_usable += s.probability * static_cast<double>(v.fit_free);
    const int64_t filled = std::min(tasks * group.gpu_milli * group.num_gpu, total_free);
    fill_usable += s.probability * static_cast<double>(filled);
  }
  const double usable = (1 - fill_weight_) * next_task_usable + fill_weight_ * fill_usable;
  return static_cast<double>(total_free) - usable;
}

}  // namespace gpupool::pool::placement
