// File: pool/placement/shape_distribution.h
//
// A workload's task shapes and how often each occurs: the "target workload" that FGD (ATC '23 §4)
// measures fragmentation against. A GPU is fragmented, for a given shape, when a task of that shape
// could not use it; weighting by the shapes' frequencies gives the capacity the workload is
// expected to be unable to use.
//
//   std::vector<ShapeSample> samples = ...;              // one per task of the workload
//   ShapeDistribution d = ShapeDistribution::Typical(samples, cluster.models());
//   for (const TaskShape& s : d.shapes()) ... s.probability ...
#ifndef GPUPOOL_POOL_PLACEMENT_SHAPE_DISTRIBUTION_H_
#define GPUPOOL_POOL_PLACEMENT_SHAPE_DISTRIBUTION_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pool/placement/model_set.h"

namespace gpupool::pool::placement {

// One task of a workload, as written in its trace (the model constraint is kept as its text
// because the reference implementation keys shapes by it).
struct ShapeSample {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;
  std::string model_spec;  // '|'-separated allowed models, empty for any
};

struct TaskShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;  // 0 unless the distribution was built with memory in the key
  int num_gpu = 0;
  int gpu_milli = 0;
  std::string model_spec;
  ModelSet models;
  double probability = 0;
  int64_t count = 0;  // tasks of this shape in the samples
};

struct TypicalShapeOptions {
  // Keep the most frequent shapes until they cover this share of the tasks (the paper uses 95%).
  double coverage = 0.95;
  // The paper keys shapes by CPU and GPU only; memory-aware policies may add it.
  bool key_memory = false;
};

class ShapeDistribution {
 public:
  ShapeDistribution() = default;

  // FGD's "typical pods": shapes ordered by frequency (ties: larger CPU, GPU share, GPU count,
  // model text first, as the reference implementation orders them), truncated to the most
  // frequent ones covering `coverage` of the samples, probabilities renormalised to sum to 1.
  static ShapeDistribution Typical(std::span<const ShapeSample> samples, const ModelIndex& models,
                                   const TypicalShapeOptions& options = {});

  // Shapes as given (probabilities already set, summing to 1 or to 0 for an empty workload).
  static ShapeDistribution FromShapes(std::vector<TaskShape> shapes);

  std::span<const TaskShape> shapes() const { return shapes_; }

 private:
  std::vector<TaskShape> shapes_;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_SHAPE_DISTRIBUTION_H_
