// File: pool/sim/trace.h
//
// The records of the Alibaba GPU-sharing trace (openb, ATC '23; see traces/openb/README.md) as the
// simulator uses them. Nodes are placement::NodeCapacity; pods are PodSpec.
#ifndef GPUPOOL_POOL_SIM_TRACE_H_
#define GPUPOOL_POOL_SIM_TRACE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "pool/placement/cluster_state.h"
#include "pool/placement/pod_request.h"
#include "pool/placement/shape_distribution.h"

namespace gpupool::pool::sim {

using placement::NodeCapacity;

struct PodSpec {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
  int gpu_milli = 0;     // per GPU, 1..1000 when num_gpu > 0
  std::string gpu_spec;  // allowed GPU models, '|'-separated; empty for any
  std::string qos;       // "LS" (latency-sensitive), "BE" (best effort), ... when the file has it
  // Seconds from the trace start, when the file has them (the timed replay needs them).
  std::optional<int64_t> creation_time;
  std::optional<int64_t> deletion_time;
  std::optional<int64_t> scheduled_time;

  int64_t gpu_demand_milli() const { return int64_t{num_gpu} * gpu_milli; }
};

// The request a pod makes, its model constraint resolved against a cluster's models.
placement::PodRequest ToRequest(const PodSpec& pod, const placement::ModelIndex& models);

// The pod as a sample of the workload's shape distribution.
placement::ShapeSample ToShapeSample(const PodSpec& pod);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_TRACE_H_
