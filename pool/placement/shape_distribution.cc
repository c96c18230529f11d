#include "pool/placement/shape_distribution.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"

namespace gpupool::pool::placement {
namespace {

struct Key {
  int64_t cpu_milli;
  int64_t memory_mib;
  int num_gpu;
  int gpu_milli;
  std::string model_spec;

  bool operator==(const Key&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Key& k) {
    return H::combine(std::move(h), k.cpu_milli, k.memory_mib, k.num_gpu, k.gpu_milli,
                      k.model_spec);
  }
};

// The reference orders equal counts by its PodResource.Less reversed: larger CPU first, then
// larger GPU share, more GPUs, and the greater model text.
bool MoreTypical(const TaskShape& a, const TaskShape& b) {
  if (a.count != b.count) return a.count > b.count;
  return std::tie(a.cpu_milli, a.gpu_milli, a.num_gpu, a.model_spec, a.memory_mib) >
         std::tie(b.cpu_milli, b.gpu_milli, b.num_gpu, b.model_spec, b.memory_mib);
}

}  // namespace

ShapeDistribution ShapeDistribution::Typical(std::span<const ShapeSample> samples,
                                             const ModelIndex& models,
                                             const TypicalShapeOptions& options) {
  absl::flat_hash_map<Key, int64_t> counts;
  for (const ShapeSample& s : samples) {
    ++counts[Key{s.cpu_milli, options.key_memory ? s.memory_mib : 0, s.num_gpu,
                 s.num_gpu > 0 ? s.gpu_milli : 0, s.model_spec}];
  }
  std::vector<TaskShape> all;
  all.reserve(counts.size());
  for (const auto& [key, count] : counts) {
    TaskShape shape;
    shape.cpu_milli = key.cpu_milli;
    shape.memory_mib = key.memory_mib;
    shape.num_gpu = key.num_gpu;
    shape.gpu_milli = key.gpu_milli;
    shape.model_spec = key.model_spec;
    shape.models = models.ResolveSpec(key.model_spec);
    shape.count = count;
    all.push_back(std::move(shape));
  }
  std::sort(all.begin(), all.end(), MoreTypical);

  ShapeDistribution d;
  const double total = static_cast<double>(samples.size());
  const double wanted = options.coverage * total;
  double covered = 0;
  size_t kept = 0;
  while (kept < all.size() && covered < wanted) covered += static_cast<double>(all[kept++].count);
  all.resize(kept);
  // Same arithmetic as the reference (share of all tasks, then rescaled by the share kept), so
  // that scores truncated to integers later agree with it.
  for (TaskShape& shape : all) {
    shape.probability = static_cast<double>(shape.count) / total;
    if (covered < total) shape.probability /= covered / total;
  }
  d.shapes_ = std::move(all);
  return d;
}

ShapeDistribution ShapeDistribution::FromShapes(std::vector<TaskShape> shapes) {
  ShapeDistribution d;
  d.shapes_ = std::move(shapes);
  return d;
}

}  // namespace gpupool::pool::placement
