// File: pool/placement/decision.h
//
// What a placement policy answers for one request: a node and the GPUs on it, or "unschedulable
// now" (no node passes the filter on the current state). That is a scheduling outcome, not an
// error: the caller decides whether to queue, skip or preempt.
#ifndef GPUPOOL_POOL_PLACEMENT_DECISION_H_
#define GPUPOOL_POOL_PLACEMENT_DECISION_H_

#include "absl/container/inlined_vector.h"

namespace gpupool::pool::placement {

// GPU indices within one node, in the order they were chosen.
using GpuIndices = absl::InlinedVector<int, 8>;

struct Decision {
  static Decision Unschedulable() { return Decision{}; }
  static Decision Placed(int node, GpuIndices gpus) { return Decision{node, std::move(gpus)}; }

  bool placed() const { return node >= 0; }

  int node = -1;  // index into the ClusterView; -1 when unschedulable
  GpuIndices gpus;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_DECISION_H_
