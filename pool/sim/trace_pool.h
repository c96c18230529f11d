// File: pool/sim/trace_pool.h
//
// A trace's cluster and pods in the pool scheduler's terms, so that every simulation mode drives
// the real pool::Scheduler (scheduler.h), the one the head runs:
//   - a trace node becomes a pool node that declares the trace's CPU and memory, its GPUs of the
//     trace's model label (opaque: "G2", "V100M32"; the catalogue is not consulted, so a label
//     that happens to be a catalogue name stays the trace's);
//   - a pod becomes a lease request: a sharing pod one fraction of one GPU, a multi-GPU pod that
//     many whole GPUs on one node, a CPU-only pod a host-only slot; its CPU and memory are split
//     evenly over its slots (rounded up: at most num_gpu-1 milli-cores or MiB more than the pod's),
//     its `gpu_spec` becomes allowed models.
//
//   absl::StatusOr<Inventory> inventory = TraceInventory(nodes);
//   LeaseRequest r = TraceRequest(pod, "pod-7");
#ifndef GPUPOOL_POOL_SIM_TRACE_POOL_H_
#define GPUPOOL_POOL_SIM_TRACE_POOL_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/inventory.h"
#include "pool/scheduler/lease_request.h"
#include "pool/scheduler/scheduler.h"
#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

// GPU memory given to every trace GPU, and to a fraction per milli-GPU of compute: the trace has
// no GPU memory, so memory is made proportional to compute and never decides on its own.
inline constexpr int64_t kTraceMibPerMilliGpu = 256;

// `name_prefixes`, when not empty, holds one string per node put before its name (the reference
// simulator's per-seed random node order is a random prefix; names order equal scores).
absl::StatusOr<Inventory> TraceInventory(std::span<const NodeCapacity> nodes,
                                         std::span<const std::string> name_prefixes = {});

LeaseRequest TraceRequest(const PodSpec& pod, std::string id, std::string team = "trace");

// The scheduler's options for replaying `pods` with placement policy `policy` (an alias such as
// "default" is resolved): FGD is given the pod list in advance, as its paper defines it, and
// `seed` seeds a policy's own random stream. InvalidArgument, naming the allowed ones, for a
// policy the scheduler does not have.
absl::StatusOr<SchedulerOptions> TraceSchedulerOptions(const std::string& policy,
                                                       std::span<const PodSpec> pods, uint64_t seed);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_TRACE_POOL_H_
