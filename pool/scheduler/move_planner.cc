#include "pool/scheduler/move_planner.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "pool/scheduler/placement.h"

namespace gpupool::pool {
namespace {

// Plans are verified (movers placed on a copy of the state) cheapest first; past this many
// failures the request waits for the next cycle rather than costing the cycle a long search.
constexpr size_t kMaxPlansVerified = 16;

// How to make room for one slot on one GPU.
struct Clearing {
  int gpu = 0;
  double cost = 0;
  std::vector<size_t> moved;
};

// The cheapest leases of GPU `g` (`on_gpu`, cheapest first, only those that can go somewhere)
// whose moving lets one slot of `r` fit there, without any that turn out unnecessary; nullopt
// when moving all of them would not (a lease that cannot move is in the way). `scratch` is a copy
// of the state, used to ask and left as it was.
std::optional<Clearing> ClearOneSlot(CapacityState& scratch, int g, const LeaseRequest& r,
                                     const std::vector<size_t>& on_gpu,
                                     const std::vector<MoveCandidate>& movable) {
  const auto fits = [&](const std::vector<size_t>& moved) {
    for (size_t i : moved) scratch.Give(g, movable[i].request->slot);
    const bool fits = scratch.Fits(g, r.slot);
    for (size_t i : moved) scratch.Take(g, movable[i].request->slot);
    return fits;
  };
  Clearing clearing{.gpu = g};
  for (size_t i : on_gpu) {
    if (fits(clearing.moved)) break;
    clearing.moved.push_back(i);
  }
  if (!fits(clearing.moved)) return std::nullopt;
  // A cheap small lease taken before a big one may not be needed once the big one goes.
  for (size_t k = clearing.moved.size(); k-- > 0;) {
    std::vector<size_t> without = clearing.moved;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(k));
    if (fits(without)) clearing.moved = std::move(without);
  }
  for (size_t i : clearing.moved) clearing.cost += movable[i].cost;
  return clearing;
}

// Whether the plan works on `state`: the request takes its GPUs once the movers are gone, and
// every mover finds a place that is free now, never one of the request's GPUs. Fills in the
// movers' destinations.
bool Verify(const PoolTopology& topology, const CapacityState& state, const LeaseRequest& r,
            MovePlan& plan, const std::vector<MoveCandidate>& movable, const PlacementOptions& options) {
  CapacityState trial = state;
  for (size_t i : plan.moved) trial.Give(movable[i].gpu, movable[i].request->slot);
  for (int g : plan.gpus) {
    if (!trial.Fits(g, r.slot)) return false;
    trial.Take(g, r.slot);
    trial[g].schedulable = false;  // a mover placed here would be moved for nothing
  }
  std::vector<size_t> order(plan.moved.size());  // positions in plan.moved, hardest to place first
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ca = SlotComputeMilli(movable[plan.moved[a]].request->slot);
    const int cb = SlotComputeMilli(movable[plan.moved[b]].request->slot);
    return ca != cb ? ca > cb : a < b;
  });
  plan.destinations.assign(plan.moved.size(), -1);
  for (size_t k : order) {
    const MoveCandidate& m = movable[plan.moved[k]];
    if (m.reclaim) continue;  // taken back: it needs no room
    std::optional<std::vector<int>> place =
        PlaceRequest(topology, trial, *m.request, *m.destinations, {.now_s = options.now_s});
    if (!place) return false;
    trial.Take(place->front(), m.request->slot);
    plan.destinations[k] = place->front();
  }
  return true;
}

}  // namespace

std::optional<MovePlan> PlanMoves(const PoolTopology& topology, const CapacityState& state,
                                  const LeaseRequest& r, const std::vector<int>& candidates,
                                  const std::vector<MoveCandidate>& movable,
                                  const PlacementOptions& options) {
  // A lease that fits nowhere now cannot move, whatever the plan: leave it out from the start
  // (asked lazily, only of leases on GPUs the request could use).
  std::vector<int8_t> can_move(movable.size(), -1);
  const auto CanMove = [&](size_t i) {
    const MoveCandidate& m = movable[i];
    if (m.reclaim) return true;  // taken back: it needs no room
    if (can_move[i] < 0) {
      can_move[i] = PlaceRequest(topology, state, *m.request, *m.destinations, {.now_s = options.now_s})
                        .has_value();
    }
    return can_move[i] == 1;
  };
  std::map<int, std::vector<size_t>> on_gpu;  // GPU -> its movable leases, cheapest first
  for (size_t i = 0; i < movable.size(); ++i) on_gpu[movable[i].gpu].push_back(i);
  for (auto& [g, leases] : on_gpu) {
    std::sort(leases.begin(), leases.end(), [&](size_t a, size_t b) {
      return std::tie(movable[a].cost, a) < std::tie(movable[b].cost, b);
    });
  }
  // Per domain (an island for island gangs, else a node: a pair with no topology constraint is
  // planned within one node, which is enough to find room), the ways to clear one slot per GPU.
  std::map<int, std::vector<Clearing>> domains;
  CapacityState scratch = state;
  for (int g : candidates) {
    if (!GpuOpenTo(state, g, r, options)) continue;
    std::vector<size_t> leases;
    if (auto it = on_gpu.find(g); it != on_gpu.end()) {
      for (size_t i : it->second) {
        if (CanMove(i)) leases.push_back(i);
      }
    }
    std::optional<Clearing> c = ClearOneSlot(scratch, g, r, leases, movable);
    if (!c) continue;
    const GpuStatic& s = topology.gpus()[g];
    domains[r.topology == GangTopology::kSameNvLinkIsland ? s.island : s.node].push_back(std::move(*c));
  }
  std::vector<MovePlan> plans;
  for (auto& [domain, clearings] : domains) {
    if (static_cast<int>(clearings.size()) < r.slot_count) continue;
    std::sort(clearings.begin(), clearings.end(), [](const Clearing& a, const Clearing& b) {
      return std::make_tuple(a.cost, a.moved.size(), a.gpu) < std::make_tuple(b.cost, b.moved.size(), b.gpu);
    });
    // One slot: every GPU is a plan of its own, so that one whose movers cannot all go where the
    // check above guessed does not hide the others. A gang: the domain's cheapest GPUs.
    const size_t first_slots = r.slot_count == 1 ? clearings.size() : 1;
    for (size_t start = 0; start < first_slots; ++start) {
      MovePlan plan;
      for (int slot = 0; slot < r.slot_count; ++slot) {
        const Clearing& c = clearings[start + static_cast<size_t>(slot)];
        plan.gpus.push_back(c.gpu);
        plan.cost += c.cost;
        plan.moved.insert(plan.moved.end(), c.moved.begin(), c.moved.end());
      }
      // Nothing to move: the request fits here as things are (or not for a reason no move fixes).
      if (!plan.moved.empty()) plans.push_back(std::move(plan));
    }
  }
  std::sort(plans.begin(), plans.end(), [](const MovePlan& a, const MovePlan& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    if (a.moved.size() != b.moved.size()) return a.moved.size() < b.moved.size();
    return a.gpus < b.gpus;
  });
  for (size_t i = 0; i < plans.size() && i < kMaxPlansVerified; ++i) {
    if (Verify(topology, state, r, plans[i], movable, options)) return std::move(plans[i]);
  }
  return std::nullopt;
}

}  // namespace gpupool::pool
