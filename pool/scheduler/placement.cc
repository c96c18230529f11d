#include "pool/scheduler/placement.h"

#include <algorithm>
#include <limits>
#include <map>

namespace gpupool::pool {
namespace {

bool ModelAllowed(const GpuStatic& gpu, const LeaseRequest& r) {
  if (r.allowed_models.empty()) return true;
  if (gpu.model == nullptr) return false;
  return std::find(r.allowed_models.begin(), r.allowed_models.end(), gpu.model->name) !=
         r.allowed_models.end();
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

struct Filled {
  std::vector<int> gpus;
  int64_t stranded = 0;  // compute left free on the touched nodes (lower packs better)
};

// Fills one domain greedily on scratch copies of its GPUs' free capacity.
std::optional<Filled> FillDomain(const PoolTopology& topology, const CapacityState& state,
                                 const std::vector<int>& domain, const LeaseRequest& r,
                                 bool first_fit) {
  const int need = SlotComputeMilli(r.slot);
  const bool whole = r.slot.kind == SlotKind::kWholeGpu;
  std::vector<int> compute(domain.size());
  std::vector<int64_t> memory(domain.size());
  std::vector<char> untouched(domain.size());
  std::map<int, int64_t> node_free;  // free compute of the nodes the domain touches
  for (size_t i = 0; i < domain.size(); ++i) {
    compute[i] = state[domain[i]].compute_free_milli;
    memory[i] = state[domain[i]].memory_free_mib;
    untouched[i] = state.Untouched(domain[i]);
    int node = topology.gpus()[domain[i]].node;
    if (!node_free.contains(node)) {
      int64_t free = 0;
      for (int g : topology.nodes()[node]) free += state[g].compute_free_milli;
      node_free[node] = free;
    }
  }
  Filled out;
  for (int slot = 0; slot < r.slot_count; ++slot) {
    int best = -1;
    std::pair<int64_t, int64_t> best_key{std::numeric_limits<int64_t>::max(), 0};
    for (size_t i = 0; i < domain.size(); ++i) {
      bool fits = whole ? untouched[i] : (compute[i] >= need && memory[i] >= r.slot.memory_mib);
      if (!fits) continue;
      if (first_fit) {
        best = static_cast<int>(i);
        break;
      }
      // Tightest GPU first; then the node with the least free compute (pack nodes).
      std::pair<int64_t, int64_t> key{compute[i] - need, node_free[topology.gpus()[domain[i]].node]};
      if (best < 0 || key < best_key) {
        best = static_cast<int>(i);
        best_key = key;
      }
    }
    if (best < 0) return std::nullopt;
    compute[best] -= need;
    memory[best] -= whole ? memory[best] : r.slot.memory_mib;
    untouched[best] = false;
    node_free[topology.gpus()[domain[best]].node] -= need;
    out.gpus.push_back(domain[best]);
  }
  std::vector<int> touched;
  for (int g : out.gpus) touched.push_back(topology.gpus()[g].node);
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (int n : touched) out.stranded += node_free[n];
  return out;
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
  auto usable = [&](int g) {
    const GpuState& c = state[g];
    if (!options.ignore_health && !c.schedulable) return false;
    if (!state.Fits(g, r.slot)) return false;
    if (options.ignore_reservations) return true;
    if (c.reserved_for != 0 && c.reserved_for != options.owner) return false;
    if (!options.ignore_gang_reservations && c.gang_reserved_for != 0 &&
        c.gang_reserved_for != options.owner) {
      // Backfill: only work known to finish before the gang's expected start.
      return r.runtime_estimate_s.has_value() &&
             options.now_s + *r.runtime_estimate_s <= c.gang_reserved_until_s;
    }
    return true;
  };
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
    std::optional<Filled> filled = FillDomain(topology, state, domain, r, options.first_fit);
    if (!filled) continue;
    if (options.first_fit) return filled->gpus;
    if (!best || filled->stranded < best->stranded) best = std::move(filled);
  }
  if (!best) return std::nullopt;
  return best->gpus;
}

}  // namespace gpupool::pool
