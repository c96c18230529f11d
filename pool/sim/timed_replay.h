// File: pool/sim/timed_replay.h
//
// "Timed mode": the openb trace replayed in time, with departures, through the pool scheduler the
// head runs (pool/scheduler/scheduler.h, over the trace as a pool: trace_pool.h). Each pod is
// submitted at its creation time, waits in the scheduler's queue (priority, then submission
// order) until it is granted, runs for its trace runtime, and leaves. Latency-sensitive pods (qos
// LS) outrank other pods, which outrank best-effort ones (qos BE); a pod that finds no room may
// preempt lower-priority pods (the scheduler's priority preemption, least work lost first); the
// evicted pods stop at once, go back to the queue and restart (the trace has no checkpoints).
// Reports utilisation over time, queueing delay, job completion time and preemptions, for any
// placement policy (SchedulerOptions::placement_policy).
//
// Runtime rule (the trace README asks for one): a pod that was scheduled in the trace runs for
// deletion_time - scheduled_time; a pod still pending when the trace was taken (no
// scheduled_time) runs for deletion_time - creation_time, the longest it could have run in the
// trace's window. Pods without creation and deletion times (the multigpu20 file) cannot be
// replayed in time and are refused.
#ifndef GPUPOOL_POOL_SIM_TIMED_REPLAY_H_
#define GPUPOOL_POOL_SIM_TIMED_REPLAY_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

struct TimedOptions {
  std::string policy = "default";
  uint64_t seed = 42;              // for policies with a random stream
  int64_t sample_interval_s = 3600;  // utilisation samples
  bool preemption = true;          // higher-priority pods may evict lower ones
  // Divides arrival times (runtimes unchanged): the raw trace keeps a 6,212-GPU cluster nearly
  // idle, so compressing arrivals is how a timed run reaches the load where policies differ.
  double compress = 1.0;
  // Called as simulated time advances (seconds, end), for progress output.
  std::function<void(int64_t, int64_t)> progress;
};

struct TimedResult {
  std::string policy;
  int64_t pods = 0;               // GPU pods replayed
  int64_t completed = 0;
  int64_t never_placed = 0;       // still waiting when the last pod left
  // Allocated GPU milli / cluster GPU milli, time-averaged from the first to the last arrival
  // (afterwards the cluster only drains).
  double mean_gpu_allocation = 0;
  std::vector<double> allocation_samples;  // the same, every sample_interval_s
  double queue_delay_mean_s = 0;
  double queue_delay_p50_s = 0;
  double queue_delay_p95_s = 0;
  double queue_delay_p99_s = 0;
  double jct_mean_s = 0;          // completion - creation
  int64_t preemptions = 0;
  double gpu_hours_lost = 0;      // progress of evicted pods, thrown away
  double seconds = 0;             // wall time of the replay
};

absl::StatusOr<TimedResult> RunTimed(std::span<const NodeCapacity> nodes,
                                     std::span<const PodSpec> pods, const TimedOptions& options);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_TIMED_REPLAY_H_
