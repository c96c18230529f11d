#include "pool/placement/fgd_fragmentation.h"

namespace gpupool::pool::placement {
namespace {

// The reference files each shape's contribution under one of seven categories and sums all but
// "satisfied" at the end; summing per category first is what makes its rounding what it is.
enum Category { kLackBoth, kLackGpu, kSatisfied, kLackCpu, kCpuTaskFits, kCpuTaskLacksCpu, kNoAccess, kCategories };

}  // namespace

double FgdNodeFragmentation(int model_id, int64_t cpu_free, std::span<const int16_t> gpu_free,
                            std::span<const TaskShape> shapes) {
  double amount[kCategories] = {};
  int64_t total_free = 0;
  for (int16_t f : gpu_free) total_free += f;

  for (const TaskShape& shape : shapes) {
    const double p = shape.probability;
    const bool cpu_ok = cpu_free >= shape.cpu_milli;
    if (shape.gpu_milli == 0) {
      amount[cpu_ok ? kCpuTaskFits : kCpuTaskLacksCpu] += p * static_cast<double>(total_free);
      continue;
    }
    if (!shape.models.Allows(model_id)) {
      amount[kNoAccess] += p * static_cast<double>(total_free);
      continue;
    }
    int fitting = 0;
    int64_t below_share = 0;  // free capacity on GPUs too small for one of this shape's GPUs
    for (int16_t f : gpu_free) {
      if (f >= shape.gpu_milli) {
        ++fitting;
      } else {
        below_share += f;
      }
    }
    if (fitting >= shape.num_gpu) {
      if (cpu_ok) {
        amount[kLackGpu] += p * static_cast<double>(below_share);
        amount[kSatisfied] += p * static_cast<double>(total_free - below_share);
      } else {
        amount[kLackCpu] += p * static_cast<double>(total_free);
      }
    } else {
      amount[cpu_ok ? kLackGpu : kLackBoth] += p * static_cast<double>(total_free);
    }
  }
  double fragmented = 0;
  for (int c = 0; c < kCategories; ++c) {
    if (c != kSatisfied) fragmented += amount[c];
  }
  return fragmented;
}

}  // namespace gpupool::pool::placement
