#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

placement::PodRequest ToRequest(const PodSpec& pod, const placement::ModelIndex& models) {
  placement::PodRequest r;
  r.cpu_milli = pod.cpu_milli;
  r.memory_mib = pod.memory_mib;
  r.num_gpu = pod.num_gpu;
  r.gpu_milli = pod.num_gpu > 0 ? pod.gpu_milli : 0;
  if (pod.num_gpu > 0) r.models = models.ResolveSpec(pod.gpu_spec);
  return r;
}

placement::ShapeSample ToShapeSample(const PodSpec& pod) {
  return placement::ShapeSample{pod.cpu_milli, pod.memory_mib, pod.num_gpu,
                                pod.num_gpu > 0 ? pod.gpu_milli : 0, pod.gpu_spec};
}

}  // namespace gpupool::pool::sim
