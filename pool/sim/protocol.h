// File: pool/sim/protocol.h
//
// "Protocol mode": the FGD paper's evaluation (traces/openb/README.md). For each seed: build the
// tuned, shuffled workload (workload.h), replay it on an empty cluster one arrival at a time with
// no departures, skip what cannot be placed, and log the allocation curve (allocation_curve.h).
// The per-seed figures are then averaged.
//
// The replay drives the pool scheduler the head runs (pool/scheduler/scheduler.h) over the trace
// as a pool (trace_pool.h): each arrival is submitted and one scheduling cycle runs; a pod the
// scheduler refuses, or leaves waiting, is withdrawn (skipped). `policy` is the scheduler's
// placement policy (SchedulerOptions::placement_policy, "packing" included).
//
//   ProtocolOptions options;
//   options.policy = "fgd";
//   options.seeds = {42, 43};
//   absl::StatusOr<ProtocolResult> r = RunProtocol(nodes, pods, options);
//   double headline = *r->mean_allocated_pct[100];
#ifndef GPUPOOL_POOL_SIM_PROTOCOL_H_
#define GPUPOOL_POOL_SIM_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

enum class TieOrder {
  // Equal scores go to the lexicographically smallest node name (the README's rule).
  kByName,
  // The paper's simulator prefixes node names with a random permutation drawn after the workload,
  // which makes its name order random per seed; this reproduces that.
  kShuffledPerSeed,
};

struct SeedResult {
  uint64_t seed = 0;
  std::vector<std::optional<double>> allocated_pct;  // the figure at 0..max_percent
  int64_t pods = 0;                // arrivals
  int64_t placed = 0;
  int64_t workload_demand_milli = 0;
  int appended = 0;
  int removed = 0;
  double seconds = 0;              // wall time of the replay
};

struct ProtocolResult {
  std::string policy;                                     // canonical name
  int64_t cluster_gpus = 0;
  std::vector<SeedResult> seeds;
  std::vector<std::optional<double>> mean_allocated_pct;  // mean over the seeds that have a value
};

struct ProtocolOptions {
  std::string policy = "default";
  std::vector<uint64_t> seeds = {42, 43, 44, 45, 46, 47, 48, 49, 50, 51};
  double tune = 1.3;
  int max_percent = 130;
  TieOrder tie_order = TieOrder::kByName;
  // Called after each seed, for progress reports on long runs.
  std::function<void(const SeedResult&, int done, int total)> on_seed_done;
};

// Fails with kInvalidArgument for an unknown policy or an invalid node list.
absl::StatusOr<ProtocolResult> RunProtocol(std::span<const NodeCapacity> nodes,
                                           std::span<const PodSpec> pods,
                                           const ProtocolOptions& options);

// One seed of the above.
absl::StatusOr<SeedResult> RunProtocolSeed(std::span<const NodeCapacity> nodes,
                                           std::span<const PodSpec> pods,
                                           const ProtocolOptions& options, uint64_t seed);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_PROTOCOL_H_
