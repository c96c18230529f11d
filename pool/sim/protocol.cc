#include "pool/sim/protocol.h"

#include <chrono>
#include <numeric>

#include "pool/placement/policy_registry.h"
#include "pool/placement/random_stream.h"
#include "pool/sim/allocation_curve.h"
#include "pool/sim/workload.h"

namespace gpupool::pool::sim {

namespace placement = ::gpupool::pool::placement;

absl::StatusOr<SeedResult> RunProtocolSeed(std::span<const NodeCapacity> nodes,
                                           std::span<const PodSpec> pods,
                                           const ProtocolOptions& options, uint64_t seed) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<placement::ClusterState> state = placement::ClusterState::Create(nodes);
  if (!state.ok()) return state.status();

  placement::RandomStream random(seed);
  const ProtocolWorkload workload =
      BuildProtocolWorkload(pods, state->total_gpu_milli(), options.tune, random);
  if (options.tie_order == TieOrder::kShuffledPerSeed) {
    std::vector<int> ranks(state->size());
    std::iota(ranks.begin(), ranks.end(), 0);
    random.Shuffle(std::span<int>(ranks));
    state->SetTieRanks(std::move(ranks));
  }

  placement::PolicyContext context;
  context.models = &state->models();
  context.workload.reserve(pods.size());
  for (const PodSpec& p : pods) context.workload.push_back(ToShapeSample(p));
  // A stream of its own, so that a policy's draws never shift the workload's.
  context.seed = seed * 0x9E3779B97F4A7C15ull + 1;
  absl::StatusOr<std::unique_ptr<placement::PlacementPolicy>> policy =
      placement::MakePolicy(options.policy, context);
  if (!policy.ok()) return policy.status();

  // Resolve each distinct pod's request once; arrivals repeat pods.
  std::vector<placement::PodRequest> requests;
  requests.reserve(pods.size());
  for (const PodSpec& p : pods) requests.push_back(ToRequest(p, state->models()));

  AllocationCurve curve(state->total_gpu_milli() / placement::kMilliPerGpu, options.max_percent);
  SeedResult result;
  result.seed = seed;
  result.workload_demand_milli = workload.demand_milli;
  result.appended = workload.appended;
  result.removed = workload.removed;
  int64_t arrived = 0;
  int64_t allocated = 0;
  for (int pod : workload.arrivals) {
    const placement::PodRequest& request = requests[pod];
    const placement::Decision d = (*policy)->Decide(state->view(), request);
    if (d.placed()) {
      state->Apply(d.node, request, d.gpus);
      allocated += request.gpu_demand_milli();
      ++result.placed;
    }
    arrived += request.gpu_demand_milli();
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
