#include "pool/scheduler/free_capacity_index.h"

#include <algorithm>
#include <limits>
#include <map>

namespace gpupool::pool {
namespace {

// A candidate answer of one domain, compared as the scan compares domains: least stranded
// compute, then the domain whose first usable GPU comes first.
struct Pick {
  int64_t stranded = 0;
  int first = 0;
  std::vector<int> gpus;
};

void Offer(std::optional<Pick>& best, Pick pick) {
  if (!best || std::tie(pick.stranded, pick.first) < std::tie(best->stranded, best->first)) {
    best = std::move(pick);
  }
}

}  // namespace

FreeCapacityIndex::Domains FreeCapacityIndex::Partition(const PoolTopology& topology,
                                                        const std::vector<int>& candidates,
                                                        bool by_island) {
  std::map<int, std::vector<int>> by_key;  // node or island -> its candidate GPUs, ascending
  for (int g : candidates) {
    const GpuStatic& s = topology.gpus()[g];
    by_key[by_island ? s.island : s.node].push_back(g);
  }
  Domains d;
  for (auto& [key, gpus] : by_key) d.gpus.push_back(std::move(gpus));
  std::sort(d.gpus.begin(), d.gpus.end(),
            [](const std::vector<int>& a, const std::vector<int>& b) { return a[0] < b[0]; });
  d.of_node.resize(topology.nodes().size());
  size_t largest = 0;
  for (size_t i = 0; i < d.gpus.size(); ++i) {
    int node = topology.gpus()[d.gpus[i][0]].node;
    d.node.push_back(node);
    d.of_node[node].push_back(static_cast<int>(i));
    largest = std::max(largest, d.gpus[i].size());
  }
  d.free.assign(d.gpus.size(), 0);
  d.untouched.assign(d.gpus.size(), 0);
  d.special.assign(d.gpus.size(), 1);  // entered by the first refresh
  d.by_untouched.resize(largest + 1);
  for (size_t i = 0; i < d.gpus.size(); ++i) d.specials.insert(static_cast<int>(i));
  return d;
}

FreeCapacityIndex::FreeCapacityIndex(const PoolTopology& topology, std::vector<int> candidates,
                                     const CapacityState& state)
    : topology_(&topology), candidates_(std::move(candidates)) {
  Domains nodes = Partition(topology, candidates_, /*by_island=*/false);
  Domains islands = Partition(topology, candidates_, /*by_island=*/true);
  // Islands are indexed when each lies in one node and their GPUs do not interleave: then the
  // order of their first usable GPUs, the scan's tie order, is their static order.
  islands_indexed_ = true;
  for (size_t i = 0; i < islands.gpus.size(); ++i) {
    for (int g : islands.gpus[i]) {
      if (topology.gpus()[g].node != islands.node[i]) islands_indexed_ = false;
    }
    if (i > 0 && islands.gpus[i - 1].back() > islands.gpus[i].front()) islands_indexed_ = false;
  }
  islands_are_nodes_ = islands.gpus == nodes.gpus;
  if (islands_are_nodes_ || !islands_indexed_) islands = Domains{};
  InitView(strict_, /*ignore_reservations=*/false, nodes, islands);
  InitView(relaxed_, /*ignore_reservations=*/true, nodes, islands);
  schedulable_free_of_.assign(topology.gpus().size(), 0);
  for (size_t n = 0; n < topology.nodes().size(); ++n) RefreshNode(state, static_cast<int>(n));
}

void FreeCapacityIndex::InitView(View& view, bool ignore_reservations, const Domains& nodes,
                                 const Domains& islands) {
  view.ignore_reservations = ignore_reservations;
  view.nodes = nodes;
  view.islands = islands;
  view.room_of.assign(topology_->gpus().size(), -1);
  view.room_node_free.assign(topology_->gpus().size(), 0);
}

void FreeCapacityIndex::RefreshNode(const CapacityState& state, int node) {
  for (View* view : {&strict_, &relaxed_}) {
    RefreshDomains(state, *view, view->nodes, node, &view->rooms, &view->room_of,
                   &view->room_node_free);
    RefreshDomains(state, *view, view->islands, node, nullptr, nullptr, nullptr);
  }
  if (node < 0 || node >= static_cast<int>(strict_.nodes.of_node.size())) return;
  for (int i : strict_.nodes.of_node[node]) {
    for (int g : strict_.nodes.gpus[i]) {
      int schedulable_free = state[g].schedulable ? state[g].compute_free_milli : 0;
      schedulable_free_milli_ += schedulable_free - schedulable_free_of_[g];
      schedulable_free_of_[g] = schedulable_free;
    }
  }
}

void FreeCapacityIndex::RefreshDomains(const CapacityState& state, const View& view, Domains& d,
                                       int node, std::set<Room>* rooms, std::vector<int>* room_of,
                                       std::vector<int64_t>* room_node_free) {
  if (node < 0 || node >= static_cast<int>(d.of_node.size()) || d.of_node[node].empty()) return;
  int64_t free = 0;
  for (int g : topology_->nodes()[node]) free += state[g].compute_free_milli;
  for (int i : d.of_node[node]) {
    if (d.special[i]) {
      d.specials.erase(i);
    } else {
      d.by_untouched[d.untouched[i]].erase({d.free[i], i});
      d.by_free.erase({d.free[i], i});
    }
    d.free[i] = free;
    d.untouched[i] = 0;
    d.special[i] = 0;
    for (int g : d.gpus[i]) {
      if (Odd(view, state[g])) d.special[i] = 1;
      if (state.Untouched(g)) ++d.untouched[i];
    }
    if (d.special[i]) {
      d.specials.insert(i);
    } else {
      d.by_untouched[d.untouched[i]].insert({free, i});
      d.by_free.insert({free, i});
    }
    if (rooms == nullptr) continue;
    for (int g : d.gpus[i]) {
      if ((*room_of)[g] >= 0) rooms->erase({(*room_of)[g], (*room_node_free)[g], g});
      (*room_of)[g] = -1;
      if (!d.special[i] && state[g].compute_free_milli > 0) {
        (*room_of)[g] = state[g].compute_free_milli;
        (*room_node_free)[g] = free;
        rooms->insert({(*room_of)[g], free, g});
      }
    }
  }
}

bool FreeCapacityIndex::Answers(const LeaseRequest& r, const PlacementOptions& options) const {
  if (options.first_fit || options.avoid_spare) return false;
  // Host CPU and memory are not indexed: requests that ask for them are placed by the scan.
  if (r.slot.cpu_milli > 0 || r.slot.host_memory_mib > 0 || options.ignore_host) return false;
  if (r.slot.kind != SlotKind::kWholeGpu && r.slot.kind != SlotKind::kFraction) return false;
  switch (r.topology) {
    case GangTopology::kAny:
      return r.slot.kind == SlotKind::kWholeGpu || r.slot_count == 1;
    case GangTopology::kSameNode:
      return true;
    case GangTopology::kSameNvLinkIsland:
      return islands_indexed_;
  }
  return false;
}

const FreeCapacityIndex::Domains& FreeCapacityIndex::DomainsFor(const View& view,
                                                                GangTopology topology) const {
  return topology == GangTopology::kSameNvLinkIsland && !islands_are_nodes_ ? view.islands
                                                                            : view.nodes;
}

std::optional<std::vector<int>> FreeCapacityIndex::Place(const CapacityState& state,
                                                         const LeaseRequest& r,
                                                         const PlacementOptions& options) const {
  const View& view = ViewFor(options);
  if (r.topology == GangTopology::kAny) {
    return r.slot.kind == SlotKind::kWholeGpu ? PlaceWholeAnywhere(view, state, r, options)
                                              : PlaceFractionAnywhere(view, state, r, options);
  }
  return PlaceInDomains(view, DomainsFor(view, r.topology), state, r, options);
}

// Every domain lies in one node, so filling it strands its node's free compute less the request's
// compute: domains compare by node free compute, then by position.
std::optional<std::vector<int>> FreeCapacityIndex::PlaceInDomains(
    const View& view, const Domains& d, const CapacityState& state, const LeaseRequest& r,
    const PlacementOptions& options) const {
  const int k = r.slot_count;
  const int64_t need = SlotComputeMilli(r.slot);
  const bool whole = r.slot.kind == SlotKind::kWholeGpu;
  std::optional<Pick> best;
  // Domains with an odd GPU: as the scan does, one by one.
  for (int i : d.specials) {
    std::vector<int> usable;
    for (int g : d.gpus[i]) {
      if (SlotUsable(state, g, r, options)) usable.push_back(g);
    }
    if (usable.empty() || (whole && static_cast<int>(usable.size()) < k)) continue;
    std::optional<Filled> filled = FillDomain(*topology_, state, usable, r, false);
    if (filled) Offer(best, {filled->stranded, usable[0], std::move(filled->gpus)});
  }
  // Regular domains: a GPU present in the view is usable exactly when the slot fits.
  if (whole) {
    const std::pair<int64_t, int>* first = nullptr;
    for (size_t u = static_cast<size_t>(k); u < d.by_untouched.size(); ++u) {
      if (!d.by_untouched[u].empty() && (first == nullptr || *d.by_untouched[u].begin() < *first)) {
        first = &*d.by_untouched[u].begin();
      }
    }
    if (first != nullptr) {
      Pick pick{first->first - need * k, 0, {}};
      for (int g : d.gpus[first->second]) {
        if (static_cast<int>(pick.gpus.size()) < k && state.Untouched(g)) pick.gpus.push_back(g);
      }
      pick.first = pick.gpus[0];
      Offer(best, std::move(pick));
    }
  } else {
    std::vector<int> usable;
    for (auto it = d.by_free.lower_bound({need * k, std::numeric_limits<int>::min()});
         it != d.by_free.end(); ++it) {
      usable.clear();
      for (int g : d.gpus[it->second]) {
        if (state.Fits(g, r.slot)) usable.push_back(g);
      }
      if (usable.empty()) continue;
      std::optional<Filled> filled = FillDomain(*topology_, state, usable, r, false);
      if (!filled) continue;
      Offer(best, {filled->stranded, usable[0], std::move(filled->gpus)});
      break;  // the first that fits strands least among the regular domains
    }
  }
  if (!best) return std::nullopt;
  return std::move(best->gpus);
}

// Whole GPUs anywhere: each slot goes to an untouched GPU on the node with the least free compute
// (then the lowest position); taking it lowers that node's free compute further, so the scan's
// greedy fill empties nodes one after another in (free compute, position) order.
std::optional<std::vector<int>> FreeCapacityIndex::PlaceWholeAnywhere(
    const View& view, const CapacityState& state, const LeaseRequest& r,
    const PlacementOptions& options) const {
  const int k = r.slot_count;
  const Domains& d = view.nodes;
  // (node free compute, node domain, evaluated exactly): the special domains one by one.
  std::vector<std::tuple<int64_t, int, bool>> sources;
  for (int i : d.specials) sources.emplace_back(d.free[i], i, true);
  // At most k domains are needed, so the first k of each bucket of regular domains hold every
  // one the fill uses.
  for (size_t u = 1; u < d.by_untouched.size(); ++u) {
    int taken = 0;
    for (auto it = d.by_untouched[u].begin(); it != d.by_untouched[u].end() && taken < k; ++it, ++taken) {
      sources.emplace_back(it->first, it->second, false);
    }
  }
  std::sort(sources.begin(), sources.end());
  std::vector<int> gpus;
  for (const auto& [free, i, exactly] : sources) {
    for (int g : d.gpus[i]) {
      if (static_cast<int>(gpus.size()) == k) return gpus;
      bool usable = exactly ? SlotUsable(state, g, r, options)
                            : state.Untouched(g);
      if (usable) gpus.push_back(g);
    }
  }
  if (static_cast<int>(gpus.size()) == k) return gpus;
  return std::nullopt;
}

// One fraction anywhere: the GPU it fills most tightly, then the node with the least free
// compute, then the lowest position.
std::optional<std::vector<int>> FreeCapacityIndex::PlaceFractionAnywhere(
    const View& view, const CapacityState& state, const LeaseRequest& r,
    const PlacementOptions& options) const {
  const int need = SlotComputeMilli(r.slot);
  std::optional<Room> best;
  for (auto it = view.rooms.lower_bound({need, std::numeric_limits<int64_t>::min(),
                                         std::numeric_limits<int>::min()});
       it != view.rooms.end(); ++it) {
    if (state[std::get<2>(*it)].memory_free_mib >= r.slot.memory_mib) {
      best = *it;
      break;
    }
  }
  const Domains& d = view.nodes;
  for (int i : d.specials) {
    for (int g : d.gpus[i]) {
      if (!SlotUsable(state, g, r, options)) continue;
      Room room{state[g].compute_free_milli, d.free[i], g};
      if (!best || room < *best) best = room;
    }
  }
  if (!best) return std::nullopt;
  return std::vector<int>{std::get<2>(*best)};
}

}  // namespace gpupool::pool
