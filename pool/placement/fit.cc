#include "pool/placement/fit.h"

#include <cassert>

namespace gpupool::pool::placement {

int CountGpusWithAtLeast(std::span<const int16_t> gpu_free, int milli) {
  int count = 0;
  for (int16_t f : gpu_free) count += f >= milli;
  return count;
}

int64_t TotalGpuFree(std::span<const int16_t> gpu_free) {
  int64_t total = 0;
  for (int16_t f : gpu_free) total += f;
  return total;
}

bool GpusFit(std::span<const int16_t> gpu_free, const PodRequest& request) {
  if (!request.uses_gpu()) return true;
  return CountGpusWithAtLeast(gpu_free, request.gpu_milli) >= request.num_gpu;
}

bool NodeFits(const ClusterView& cluster, int node, const PodRequest& request) {
  if (cluster.cpu_free(node) < request.cpu_milli) return false;
  if (cluster.memory_free(node) < request.memory_mib) return false;
  if (!request.uses_gpu()) return true;
  if (!request.models.Allows(cluster.model_id(node))) return false;
  return GpusFit(cluster.gpu_free(node), request);
}

int TightestGpu(std::span<const int16_t> gpu_free, int milli) {
  int best = -1;
  for (int g = 0; g < static_cast<int>(gpu_free.size()); ++g) {
    if (gpu_free[g] >= milli && (best < 0 || gpu_free[g] < gpu_free[best])) best = g;
  }
  return best;
}

GpuIndices FirstGpusInIndexOrder(std::span<const int16_t> gpu_free, const PodRequest& request) {
  GpuIndices gpus;
  for (int g = 0; g < static_cast<int>(gpu_free.size()) &&
                  static_cast<int>(gpus.size()) < request.num_gpu;
       ++g) {
    if (gpu_free[g] >= request.gpu_milli) gpus.push_back(g);
  }
  assert(static_cast<int>(gpus.size()) == request.num_gpu);
  return gpus;
}

GpuIndices DefaultGpuChoice(std::span<const int16_t> gpu_free, const PodRequest& request) {
  if (!request.uses_gpu()) return {};
  if (request.num_gpu == 1) return {TightestGpu(gpu_free, request.gpu_milli)};
  return FirstGpusInIndexOrder(gpu_free, request);
}

}  // namespace gpupool::pool::placement
