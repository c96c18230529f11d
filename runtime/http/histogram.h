// File: runtime/http/histogram.h
//
// A Prometheus-style histogram: fixed upper bounds chosen up front, a count per bucket, the sum
// and the count of every observation. Cheap to observe (a short scan), cheap to copy.
//
//   Histogram h(Histogram::Exponential(0.001, 2, 16));
//   h.Observe(0.004);
//
// Not thread-safe: its owner's lock guards it.
#ifndef GPUPOOL_RUNTIME_HTTP_HISTOGRAM_H_
#define GPUPOOL_RUNTIME_HTTP_HISTOGRAM_H_

#include <cstdint>
#include <vector>

namespace gpupool::runtime {

class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  // `count` bounds from `start`, each `factor` times the last.
  static std::vector<double> Exponential(double start, double factor, int count) {
    std::vector<double> b;
    for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
    return b;
  }

  void Observe(double value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += value;
    ++count_;
  }
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative); the last is +Inf.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(1, 0);
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_HTTP_HISTOGRAM_H_
