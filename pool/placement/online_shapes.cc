#include "pool/placement/online_shapes.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

namespace gpupool::pool::placement {
namespace {

// Past this the scaled weights are divided back down (doubles keep ~15 digits; this leaves the
// smallest weights far from underflow and the sums exact enough).
constexpr double kRenormaliseAt = 1e100;

}  // namespace

OnlineShapes::OnlineShapes(OnlineShapesOptions options)
    : options_(options), growth_(std::exp2(1.0 / std::max(1.0, options.half_life))) {}

void OnlineShapes::Observe(const PodRequest& r) {
  const Key key{r.cpu_milli,  options_.key_memory ? r.memory_mib : 0,
                r.num_gpu,    r.num_gpu > 0 ? r.gpu_milli : 0,
                r.models.any, r.models.any ? 0 : r.models.mask};
  weights_[key] += scale_;
  total_ += scale_;
  scale_ *= growth_;
  if (scale_ > kRenormaliseAt) {
    for (auto& [k, w] : weights_) w /= scale_;
    total_ /= scale_;
    scale_ = 1;
  }
  ++observations_;
  ++since_rebuild_;
  if (++since_forget_ >= std::max(1.0, options_.half_life)) {
    since_forget_ = 0;
    const double floor = total_ * options_.forget_below_share;
    std::vector<double> forgotten;
    for (auto it = weights_.begin(); it != weights_.end();) {
      if (it->second < floor) {
        forgotten.push_back(it->second);
        weights_.erase(it++);
      } else {
        ++it;
      }
    }
    // Taken off the total in a fixed order (the map's is not): every run computes the same sums.
    std::sort(forgotten.begin(), forgotten.end());
    for (double w : forgotten) total_ -= w;
  }
  // Observations since the last rebuild, against the weight observed so far counted in
  // observations of today's worth (at most about half_life / ln 2): a long-lived pool keeps
  // rebuilding as its work changes instead of ever more rarely.
  const double effective = total_ / scale_;
  const double threshold = std::max(1.0, options_.rebuild_share * effective);
  if (static_cast<double>(since_rebuild_) >= threshold) {
    since_rebuild_ = 0;
    ++version_;
  }
}

ShapeDistribution OnlineShapes::Distribution() const {
  std::vector<TaskShape> shapes;
  shapes.reserve(weights_.size());
  for (const auto& [k, w] : weights_) {
    TaskShape s;
    s.cpu_milli = k.cpu_milli;
    s.memory_mib = k.memory_mib;
    s.num_gpu = k.num_gpu;
    s.gpu_milli = k.gpu_milli;
    s.models.any = k.any_model;
    s.models.mask = k.model_mask;
    s.probability = total_ > 0 ? w / total_ : 0;
    shapes.push_back(std::move(s));
  }
  // A fixed order, so that the model built from it sums in the same order on every run (the hash
  // map's order is not part of the contract).
  std::sort(shapes.begin(), shapes.end(), [](const TaskShape& a, const TaskShape& b) {
    return std::tie(b.probability, a.cpu_milli, a.memory_mib, a.num_gpu, a.gpu_milli, a.models.any,
                    a.models.mask) < std::tie(a.probability, b.cpu_milli, b.memory_mib, b.num_gpu,
                                              b.gpu_milli, b.models.any, b.models.mask);
  });
  return ShapeDistribution::FromShapes(std::move(shapes));
}

}  // namespace gpupool::pool::placement
