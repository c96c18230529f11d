#include "pool/scheduler/domain_fill.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

namespace gpupool::pool {

bool SlotUsable(const CapacityState& state, int g, const LeaseRequest& r,
                const PlacementOptions& options) {
  const bool room = options.ignore_host ? state.GpuFits(g, r.slot) : state.Fits(g, r.slot);
  if (options.avoid_spare && !r.slot.host_only() && SpareGpu(state, g)) return false;
  return room && GpuOpenTo(state, g, r, options);
}

bool GpuOpenTo(const CapacityState& state, int g, const LeaseRequest& r,
               const PlacementOptions& options) {
  const GpuState& c = state[g];
  if (!options.ignore_health && !c.schedulable) return false;
  if (options.ignore_reservations) return true;
  if (!options.ignore_gang_reservations && c.gang_reserved_for != 0 &&
      c.gang_reserved_for != options.owner) {
    // Backfill: only work known to finish before the gang's expected start.
    return r.runtime_estimate_s.has_value() &&
           options.now_s + *r.runtime_estimate_s <= c.gang_reserved_until_s;
  }
  return true;
}

std::optional<Filled> FillDomain(const PoolTopology& topology, const CapacityState& state,
                                 const std::vector<int>& domain, const LeaseRequest& r,
                                 bool first_fit, bool ignore_host) {
  const int need = SlotComputeMilli(r.slot);
  const bool whole = r.slot.kind == SlotKind::kWholeGpu;
  std::vector<int> compute(domain.size());
  std::vector<int64_t> memory(domain.size());
  std::vector<char> untouched(domain.size());
  std::map<int, int64_t> node_free;  // free compute of the nodes the domain touches
  std::map<int, int64_t> node_slots;  // slots of this fill placed on each node so far
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
      const int node = topology.gpus()[domain[i]].node;
      if (!ignore_host && !state.HostFits(node, r.slot, node_slots[node] + 1)) continue;
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
    ++node_slots[topology.gpus()[domain[best]].node];
    out.gpus.push_back(domain[best]);
  }
  std::vector<int> touched;
  for (int g : out.gpus) touched.push_back(topology.gpus()[g].node);
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (int n : touched) out.stranded += node_free[n];
  return out;
}

}  // namespace gpupool::pool
