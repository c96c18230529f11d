#include "pool/sim/trace_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "pool/placement/policy_registry.h"

namespace gpupool::pool::sim {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<Inventory> TraceInventory(std::span<const NodeCapacity> nodes,
                                         std::span<const std::string> name_prefixes) {
  std::vector<DiscoveredNode> discovered;
  discovered.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeCapacity& n = nodes[i];
    DiscoveredNode node;
    node.name = name_prefixes.empty() ? n.name : absl::StrCat(name_prefixes[i], n.name);
    node.cpu_milli = n.cpu_milli;
    node.memory_mib = n.memory_mib;
    for (int g = 0; g < n.num_gpu; ++g) {
      DiscoveredGpu gpu;
      gpu.index = g;
      gpu.name = n.model;  // model stays empty: the label is the trace's, not the catalogue's
      gpu.memory_mib = static_cast<uint64_t>(1000 * kTraceMibPerMilliGpu);
      node.gpus.push_back(std::move(gpu));
    }
    discovered.push_back(std::move(node));
  }
  return Inventory::FromDiscovery(discovered);
}

LeaseRequest TraceRequest(const PodSpec& pod, std::string id, std::string team) {
  LeaseRequest r;
  r.id = std::move(id);
  r.team = std::move(team);
  r.workload_class = pod.qos;
  const int slots = std::max(1, pod.num_gpu);
  r.slot_count = slots;
  if (pod.num_gpu == 0) {
    r.slot = SlotShape::HostOnly(pod.cpu_milli, pod.memory_mib);
  } else if (pod.num_gpu == 1 && pod.gpu_milli < 1000) {
    r.slot = SlotShape::Fraction(kTraceMibPerMilliGpu * pod.gpu_milli, pod.gpu_milli);
  }
  r.slot.cpu_milli = CeilDiv(pod.cpu_milli, slots);
  r.slot.host_memory_mib = CeilDiv(pod.memory_mib, slots);
  if (slots > 1) r.topology = GangTopology::kSameNode;
  for (absl::string_view m : absl::StrSplit(pod.gpu_spec, '|', absl::SkipEmpty())) {
    if (std::find(r.allowed_models.begin(), r.allowed_models.end(), m) == r.allowed_models.end()) {
      r.allowed_models.emplace_back(m);
    }
  }
  return r;
}

absl::StatusOr<SchedulerOptions> TraceSchedulerOptions(const std::string& policy,
                                                       std::span<const PodSpec> pods, uint64_t seed) {
  SchedulerOptions options;
  options.placement_policy = std::string(placement::CanonicalPolicyName(policy));
  if (absl::Status valid = ValidPlacementPolicy(options.placement_policy); !valid.ok()) return valid;
  options.placement_prior.reserve(pods.size());
  for (const PodSpec& p : pods) options.placement_prior.push_back(ToShapeSample(p));
  options.placement_seed = seed;
  return options;
}

}  // namespace gpupool::pool::sim
