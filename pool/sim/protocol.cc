#include "pool/sim/protocol.h"

#include <chrono>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pool/config/scheduling_config.h"
#include "pool/placement/policy_registry.h"
#include "pool/placement/random_stream.h"
#include "pool/scheduler/scheduler.h"
#include "pool/sim/allocation_curve.h"
#include "pool/sim/trace_pool.h"
#include "pool/sim/workload.h"

namespace gpupool::pool::sim {

namespace placement = ::gpupool::pool::placement;

absl::StatusOr<SeedResult> RunProtocolSeed(std::span<const NodeCapacity> nodes,
                                           std::span<const PodSpec> pods,
                                           const ProtocolOptions& options, uint64_t seed) {
  const auto start = std::chrono::steady_clock::now();
  // A stream of its own for the policy, so that a policy's draws never shift the workload's.
  absl::StatusOr<SchedulerOptions> scheduler_options =
      TraceSchedulerOptions(options.policy, pods, seed * 0x9E3779B97F4A7C15ull + 1);
  if (!scheduler_options.ok()) return scheduler_options.status();
  // The node list is checked as the placement library checks it (names, capacities, models).
  absl::StatusOr<placement::ClusterState> cluster = placement::ClusterState::Create(nodes);
  if (!cluster.ok()) return cluster.status();
  const int64_t cluster_milli = cluster->total_gpu_milli();

  placement::RandomStream random(seed);
  const ProtocolWorkload workload = BuildProtocolWorkload(pods, cluster_milli, options.tune, random);
  // The reference simulator prefixes node names with a random permutation drawn after the
  // workload; names order equal scores, so the prefix reproduces its tie order.
  std::vector<std::string> prefixes;
  if (options.tie_order == TieOrder::kShuffledPerSeed) {
    std::vector<int> ranks(nodes.size());
    std::iota(ranks.begin(), ranks.end(), 0);
    random.Shuffle(std::span<int>(ranks));
    for (int rank : ranks) prefixes.push_back(absl::StrFormat("%06d-", rank));
  }
  absl::StatusOr<Inventory> inventory = TraceInventory(nodes, prefixes);
  if (!inventory.ok()) return inventory.status();

  // The pool scheduler the head runs, over an open pool (no teams: nothing is guaranteed and
  // nothing is preempted), with the policy under test placing.
  const SchedulingConfig config = DefaultSchedulingConfig();
  Scheduler scheduler(*inventory, config, *scheduler_options);

  AllocationCurve curve(cluster_milli / placement::kMilliPerGpu, options.max_percent);
  SeedResult result;
  result.seed = seed;
  result.workload_demand_milli = workload.demand_milli;
  result.appended = workload.appended;
  result.removed = workload.removed;
  int64_t arrived = 0;
  int64_t allocated = 0;
  int64_t now = 0;
  for (int pod : workload.arrivals) {
    // One arrival, one cycle. "A pod that cannot be placed is skipped": the scheduler refuses it
    // (it fits nowhere, ever) or it waits, and is withdrawn.
    const int64_t demand = pods[pod].gpu_demand_milli();
    absl::StatusOr<std::string> id =
        scheduler.Submit(TraceRequest(pods[pod], absl::StrCat("pod-", result.pods)), now);
    if (id.ok()) {
      if (!scheduler.Schedule(now).granted.empty()) {
        allocated += demand;
        ++result.placed;
      } else {
        (void)scheduler.Cancel(*id);
      }
    }
    ++now;
    arrived += demand;
    ++result.pods;
    curve.Record(arrived, allocated);
  }
  result.allocated_pct = curve.Figures();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

absl::StatusOr<ProtocolResult> RunProtocol(std::span<const NodeCapacity> nodes,
                                           std::span<const PodSpec> pods,
                                           const ProtocolOptions& options) {
  ProtocolResult result;
  result.policy = std::string(placement::CanonicalPolicyName(options.policy));
  for (const NodeCapacity& n : nodes) result.cluster_gpus += n.num_gpu;
  const int total = static_cast<int>(options.seeds.size());
  for (uint64_t seed : options.seeds) {
    absl::StatusOr<SeedResult> r = RunProtocolSeed(nodes, pods, options, seed);
    if (!r.ok()) return r.status();
    result.seeds.push_back(*std::move(r));
    if (options.on_seed_done) {
      options.on_seed_done(result.seeds.back(), static_cast<int>(result.seeds.size()), total);
    }
  }
  result.mean_allocated_pct.assign(options.max_percent + 1, std::nullopt);
  for (int i = 0; i <= options.max_percent; ++i) {
    double sum = 0;
    int n = 0;
    for (const SeedResult& s : result.seeds) {
      if (s.allocated_pct[i]) {
        sum += *s.allocated_pct[i];
        ++n;
      }
    }
    if (n > 0) result.mean_allocated_pct[i] = sum / n;
  }
  return result;
}

}  // namespace gpupool::pool::sim
