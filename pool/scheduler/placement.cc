#include "pool/scheduler/placement.h"

#include <algorithm>
#include <map>

namespace gpupool::pool {
namespace {

// A catalogue name (any case) names the catalogue's model; a name also matches GPUs the catalogue
// does not know by their device's own name (an opaque cluster label such as a trace's "G2").
bool ModelAllowed(const GpuStatic& gpu, const LeaseRequest& r) {
  if (r.allowed_models.empty()) return true;
  for (const std::string& name : r.allowed_models) {
    const GpuModel* known = FindGpuModel(name);
    if ((known != nullptr && gpu.model == known) || gpu.model_name == name) return true;
  }
  return false;
}

bool LabelsMatch(const GpuStatic& gpu, const LeaseRequest& r) {
  for (const auto& [k, v] : r.required_labels) {
    auto it = gpu.labels->find(k);
    if (it == gpu.labels->end() || it->second != v) return false;
  }
  for (const auto& [k, v] : r.forbidden_labels) {
    auto it = gpu.labels->find(k);
    if (it != gpu.labels->end() && it->second == v) return false;
  }
  return true;
}

}  // namespace

bool GpuMatches(const GpuStatic& gpu, const LeaseRequest& r, const std::string& group) {
  return gpu.group == group && ModelAllowed(gpu, r) && LabelsMatch(gpu, r) &&
         gpu.memory_total_mib >= r.min_gpu_memory_mib && (!r.nvlink_required || gpu.has_nvlink);
}

std::optional<std::vector<int>> PlaceRequest(const PoolTopology& topology,
                                             const CapacityState& state, const LeaseRequest& r,
                                             const std::vector<int>& candidates,
                                             const PlacementOptions& options) {
  auto usable = [&](int g) { return SlotUsable(state, g, r, options); };
  // Domains in ascending order of their first GPU, so ties and first-fit are deterministic.
  std::vector<std::vector<int>> domains;
  if (r.topology == GangTopology::kAny) {
    domains.emplace_back();
    for (int g : candidates) {
      if (usable(g)) domains.back().push_back(g);
    }
  } else {
    std::map<int, size_t> domain_of;  // node or island -> index in domains
    for (int g : candidates) {
      if (!usable(g)) continue;
      const GpuStatic& s = topology.gpus()[g];
      int key = r.topology == GangTopology::kSameNode ? s.node : s.island;
      auto [it, inserted] = domain_of.try_emplace(key, domains.size());
      if (inserted) domains.emplace_back();
      domains[it->second].push_back(g);
    }
  }
  std::optional<Filled> best;
  for (const std::vector<int>& domain : domains) {
    if (static_cast<int>(domain.size()) < r.slot_count && r.slot.kind == SlotKind::kWholeGpu) continue;
    std::optional<Filled> filled = FillDomain(topology, state, domain, r, options.first_fit, options.ignore_host);
    if (!filled) continue;
    if (options.first_fit) return filled->gpus;
    if (!best || filled->stranded < best->stranded) best = std::move(filled);
  }
  if (!best) return std::nullopt;
  return best->gpus;
}

}  // namespace gpupool::pool
