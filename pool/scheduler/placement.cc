#include "pool/scheduler/placement.h"

#include <algorithm>
#include <limits>

namespace gpupool::pool {
namespace {

bool ModelAllowed(const GpuCapacity& gpu, const LeaseRequest& r) {
  if (r.allowed_models.empty()) return true;
  if (gpu.model == nullptr) return false;
  return std::find(r.allowed_models.begin(), r.allowed_models.end(), gpu.model->name) !=
         r.allowed_models.end();
}

bool LabelsMatch(const GpuCapacity& gpu, const LeaseRequest& r) {
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

// Fills one domain greedily on scratch copies of its GPUs' free capacity. Returns the chosen
// positions and the compute left free in the domain's nodes afterwards (lower packs better).
std::optional<std::pair<std::vector<int>, int64_t>> FillDomain(const Capacity& capacity,
                                                               const std::vector<int>& domain,
                                                               const LeaseRequest& r) {
  Capacity scratch = capacity;  // small: only the copies of counters matter
  std::vector<int> chosen;
  for (int slot = 0; slot < r.slot_count; ++slot) {
    int best = -1;
    std::tuple<int64_t, int64_t, int> best_key{std::numeric_limits<int64_t>::max(), 0, 0};
    for (int g : domain) {
      if (!scratch.Fits(g, r.slot)) continue;
      const GpuCapacity& c = scratch.gpus()[g];
      // Tightest GPU first; then the node with the least free compute (pack nodes); then position.
      int64_t left = c.compute_free_milli - (r.slot.kind == SlotKind::kWholeGpu ? 1000 : r.slot.compute_milli);
      int64_t node_free = 0;
      for (int other : scratch.nodes()[c.node]) node_free += scratch.gpus()[other].compute_free_milli;
      std::tuple<int64_t, int64_t, int> key{left, node_free, g};
      if (best < 0 || key < best_key) {
        best = g;
        best_key = key;
      }
    }
    if (best < 0) return std::nullopt;
    scratch.Take(best, r.slot);
    chosen.push_back(best);
  }
  int64_t stranded = 0;
  std::vector<int> touched_nodes;
  for (int g : chosen) touched_nodes.push_back(scratch.gpus()[g].node);
  std::sort(touched_nodes.begin(), touched_nodes.end());
  touched_nodes.erase(std::unique(touched_nodes.begin(), touched_nodes.end()), touched_nodes.end());
  for (int n : touched_nodes) {
    for (int g : scratch.nodes()[n]) stranded += scratch.gpus()[g].compute_free_milli;
  }
  return std::make_pair(std::move(chosen), stranded);
}

}  // namespace

bool GpuMatches(const GpuCapacity& gpu, const LeaseRequest& r, const std::string& group) {
  return gpu.group == group && ModelAllowed(gpu, r) && LabelsMatch(gpu, r) &&
         gpu.memory_total_mib >= r.min_gpu_memory_mib && (!r.nvlink_required || gpu.has_nvlink);
}

std::optional<std::vector<int>> PlaceRequest(const Capacity& capacity, const LeaseRequest& r,
                                             const std::string& group,
                                             const PlacementOptions& options) {
  auto usable = [&](int g) {
    const GpuCapacity& c = capacity.gpus()[g];
    if (!GpuMatches(c, r, group)) return false;
    if (!options.ignore_health && !c.schedulable) return false;
    if (options.ignore_reservations) return true;
    if (!c.reserved_for.empty() && c.reserved_for != r.id) return false;
    if (!c.gang_reserved_for.empty() && c.gang_reserved_for != r.id) {
      // Backfill: only work known to finish before the gang's expected start.
      return r.runtime_estimate_s.has_value() &&
             options.now_s + *r.runtime_estimate_s <= c.gang_reserved_until_s;
    }
    return true;
  };
  std::vector<std::vector<int>> domains;
  if (r.topology == GangTopology::kAny) {
    domains.emplace_back();
    for (size_t g = 0; g < capacity.gpus().size(); ++g) {
      if (usable(static_cast<int>(g))) domains.back().push_back(static_cast<int>(g));
    }
  } else {
    const auto& groups = r.topology == GangTopology::kSameNode ? capacity.nodes() : capacity.islands();
    for (const std::vector<int>& members : groups) {
      std::vector<int> domain;
      for (int g : members) {
        if (usable(g)) domain.push_back(g);
      }
      if (!domain.empty()) domains.push_back(std::move(domain));
    }
  }
  std::optional<std::pair<std::vector<int>, int64_t>> best;
  for (const std::vector<int>& domain : domains) {
    auto filled = FillDomain(capacity, domain, r);
    if (filled && (!best || filled->second < best->second)) best = std::move(filled);
  }
  if (!best) return std::nullopt;
  return best->first;
}

}  // namespace gpupool::pool
