// File: pool/sim/allocation_curve.h
//
// The FGD paper's allocation figure (its Fig. 9a; traces/openb/README.md, "The figure at i%"):
// after every arrival the replay logs `arrived` and `allocated` GPU demand as percentages of the
// cluster's GPUs; the figure at i% is the mean of `allocated` (each row rounded to 2 decimals)
// over the rows whose `arrived`, rounded to an integer, is i — or, if there are none, whose
// rounded `arrived` lies within i±1 — rounded to 2 decimals. Rounding is half-to-even, as in the
// paper's Python analysis.
#ifndef GPUPOOL_POOL_SIM_ALLOCATION_CURVE_H_
#define GPUPOOL_POOL_SIM_ALLOCATION_CURVE_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace gpupool::pool::sim {

class AllocationCurve {
 public:
  // `cluster_gpus` is the number of whole GPUs; `max_percent` the last arrival percentage kept.
  AllocationCurve(int64_t cluster_gpus, int max_percent);

  // One log row, after an arrival (placed or skipped).
  void Record(int64_t arrived_milli, int64_t allocated_milli);

  // The figure at 0..max_percent; nullopt where no row is near.
  std::vector<std::optional<double>> Figures() const;

 private:
  struct Bucket {
    double sum = 0;
    int64_t rows = 0;
  };
  const double cluster_gpus_;
  std::vector<Bucket> buckets_;  // by rounded arrival percentage, 0..max_percent+1
};

// Python's round(x, digits) for the values this file meets (half-to-even on the scaled value).
double RoundHalfEven(double x, int digits);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_ALLOCATION_CURVE_H_
