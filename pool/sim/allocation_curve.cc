#include "pool/sim/allocation_curve.h"

#include <cfenv>
#include <cmath>

namespace gpupool::pool::sim {

double RoundHalfEven(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  // nearbyint rounds ties to even under the default rounding mode, which nothing here changes.
  return std::nearbyint(x * scale) / scale;
}

AllocationCurve::AllocationCurve(int64_t cluster_gpus, int max_percent)
    : cluster_gpus_(static_cast<double>(cluster_gpus)), buckets_(max_percent + 2) {}

void AllocationCurve::Record(int64_t arrived_milli, int64_t allocated_milli) {
  if (cluster_gpus_ <= 0) return;
  // Same expression order as the paper's analysis: milli / GPUs / 10 is a percentage.
  const double arrived = RoundHalfEven(static_cast<double>(arrived_milli) / cluster_gpus_ / 10, 0);
  const double allocated = RoundHalfEven(static_cast<double>(allocated_milli) / cluster_gpus_ / 10, 2);
  if (arrived < 0 || arrived >= static_cast<double>(buckets_.size())) return;
  Bucket& b = buckets_[static_cast<size_t>(arrived)];
  b.sum += allocated;
  ++b.rows;
}

std::vector<std::optional<double>> AllocationCurve::Figures() const {
  const int max_percent = static_cast<int>(buckets_.size()) - 2;
  std::vector<std::optional<double>> figures(max_percent + 1);
  for (int i = 0; i <= max_percent; ++i) {
    Bucket near = buckets_[i];
    if (near.rows == 0) {
      for (int j : {i - 1, i + 1}) {
        if (j < 0) continue;
        near.sum += buckets_[j].sum;
        near.rows += buckets_[j].rows;
      }
    }
    if (near.rows > 0) figures[i] = RoundHalfEven(near.sum / static_cast<double>(near.rows), 2);
  }
  return figures;
}

}  // namespace gpupool::pool::sim
