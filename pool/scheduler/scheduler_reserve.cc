// The Scheduler's spare reserves (spare_reserve.h): placement beside a reserve, the refill, and
// what status shows. A part of the Scheduler in its own file, like scheduler_cycle.cc and
// scheduler_post_filter.cc.
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {
namespace {

// The prefix of Revocation::for_request (and Lease::revoked_for) for a refill's victims.
constexpr absl::string_view kRefillFor = "reserve:";

}  // namespace

const ReserveRule* Scheduler::RestrictedBy(const PendingRequest& p, const std::string& group) const {
  const ReserveRule* rule = reserves_.For(group);
  if (rule == nullptr || ClassOf(p.request).value >= rule->min_priority) return nullptr;
  return rule;
}

bool Scheduler::LeavesReserve(const CapacityState& state, const LeaseRequest& r, const std::vector<int>& gpus,
                              const ReserveRule& rule, int spare) const {
  if (r.slot.host_only()) return true;  // takes no GPU share: leaves the reserve as it found it
  std::set<int> taken;
  for (int g : gpus) {
    if (SpareGpu(state, g)) taken.insert(g);
  }
  return spare - static_cast<int>(taken.size()) >= rule.gpus;
}

std::optional<std::vector<int>> Scheduler::PlaceLive(const PendingRequest& p, const std::string& group,
                                                     PlacementOptions options) const {
  const ReserveRule* rule = options.ignore_spare_reserve ? nullptr : RestrictedBy(p, group);
  if (rule == nullptr) return PlaceLiveAnywhere(p, group, options);
  const int spare = reserves_.SpareNow(*rule);
  const int room = spare - rule->gpus;  // spare GPUs it may take
  const LeaseRequest& r = p.request;
  const int most = r.slot.host_only() ? 0 : r.slot_count;
  // The fast paths (index, policy) while the reserve cannot bind, or when their answer leaves it.
  if (room > 0 || most == 0) {
    std::optional<std::vector<int>> gpus = PlaceLiveAnywhere(p, group, options);
    if (most <= room || !gpus || LeavesReserve(state_, r, *gpus, *rule, spare)) return gpus;
  }
  // Whole GPUs beside a reserve that has no GPU to spare: no untouched GPU is open to it (room
  // held for a request is taken, so not untouched; in a what-if, unhealthy GPUs may be).
  if (r.slot.kind == SlotKind::kWholeGpu && room <= 0 && !options.ignore_health &&
      !options.ignore_reservations) {
    return std::nullopt;
  }
  // The rest by the scan, off the spare GPUs. Exact when the reserve has no GPU to spare (the
  // common case: it binds exactly when the pool is full); with a few to spare, a multi-slot
  // request that needs some of them and other GPUs besides is refused (conservative).
  options.avoid_spare = true;
  options.owner = p.handle;
  options.first_fit = options_.first_fit;
  return PlaceRequest(topology_, state_, r, p.eligibility->candidates.at(group), options);
}

std::optional<std::vector<int>> Scheduler::PlaceHonouringReserve(const PendingRequest& p, const std::string& group,
                                                                 const std::vector<int>& candidates,
                                                                 const CapacityState& state,
                                                                 PlacementOptions options) const {
  std::optional<std::vector<int>> gpus = Place(p, candidates, state, options);
  const ReserveRule* rule = RestrictedBy(p, group);
  if (!gpus || rule == nullptr) return gpus;
  // What the request may not take is the reserve as it stands now (the live state's spare GPUs),
  // not GPUs its own victims would free: counting those would make a preemption free the reserve's
  // shortfall too, revoking more work (even urgent or nominal work) than the request needs.
  // Refilling is RefillReserves' job, from borrowed work only.
  const int spare_now = reserves_.SpareNow(*rule);
  int taken_now = 0;
  for (int g : std::set<int>(gpus->begin(), gpus->end())) taken_now += SpareGpu(state_, g) && SpareGpu(state, g) ? 1 : 0;
  if (p.request.slot.host_only() || taken_now == 0 || spare_now - taken_now >= rule->gpus) return gpus;
  CapacityState without_live_spare = state;
  for (int g : rule->group_gpus) {
    if (SpareGpu(state_, g) && SpareGpu(without_live_spare, g)) without_live_spare[g].schedulable = false;
  }
  return Place(p, candidates, without_live_spare, options);
}

CapacityState Scheduler::WithoutReserve(const ReserveRule& rule) const {
  CapacityState copy = state_;
  int hidden = 0;
  for (auto it = rule.group_gpus.rbegin(); it != rule.group_gpus.rend() && hidden < rule.gpus; ++it) {
    if (!SpareGpu(copy, *it)) continue;
    copy[*it].schedulable = false;
    ++hidden;
  }
  return copy;
}

void Scheduler::RefillReserves(int64_t now_s, CycleResult& result) {
  for (const ReserveRule& rule : reserves_.rules()) {
    if (rule.gpus <= 0 || reserves_.SpareNow(rule) >= rule.gpus) continue;
    if (memo_.RefillFutile(rule.group)) {
      continue;
    }
    // What the reserve will hold once every revoked lease of the group has stopped, less the room
    // held for the requests they were revoked for (a victim's room goes to its request's hold).
    CapacityState trial = state_;
    for (const auto& [id, lease] : leases_) {
      if (lease.group == rule.group && lease.revoke_deadline_s.has_value()) GiveBack(lease, trial);
    }
    for (const auto& [id, p] : pending_) {
      for (const Hold& h : p.holds) {
        trial.TakeShare(h.gpu, trial.FreePart(h.gpu, h.lacking()));
      }
    }
    int spare = SpareReserves::CountSpare(trial, rule);
    if (spare >= rule.gpus) continue;  // refilling already
    // Borrowed work of lower classes only: never work within nominal quota, never the work the
    // reserve is for. Lowest priority first, then the least work lost, then the most GPUs.
    // A lease marked borrowing when granted may be within nominal now (the team's other leases
    // ended): a team gives up at most what it uses beyond its nominal quota now, less what is
    // already being revoked.
    std::map<std::string, int64_t> excess;  // by team, milli-GPUs
    for (const auto& [id, lease] : leases_) {
      if (lease.group != rule.group) continue;
      auto [it, fresh] = excess.try_emplace(lease.request.team, 0);
      if (fresh) it->second = ledger_.Usage(lease.request.team, rule.group) - ledger_.Nominal(lease.request.team, rule.group);
      if (lease.revoke_deadline_s.has_value()) it->second -= lease.milli;
    }
    std::vector<Lease*> candidates;
    for (auto& [id, lease] : leases_) {
      if (lease.group != rule.group || lease.revoke_deadline_s.has_value() || !lease.borrowing) continue;
      const PriorityClass& pc = ClassOf(lease.request);
      if (!pc.preemptible || pc.value >= rule.min_priority) continue;
      if (excess[lease.request.team] < lease.milli) continue;
      candidates.push_back(&lease);
    }
    std::sort(candidates.begin(), candidates.end(), [&](const Lease* a, const Lease* b) {
      const int va = ClassOf(a->request).value, vb = ClassOf(b->request).value;
      if (va != vb) return va < vb;
      const double ca = WorkAtRisk(*a, now_s), cb = WorkAtRisk(*b, now_s);
      if (ca != cb) return ca < cb;
      if (a->gpus.size() != b->gpus.size()) return a->gpus.size() > b->gpus.size();
      return a->id < b->id;
    });
    // Spare GPUs gained by giving back (sign +1) or taking again (-1) one lease on `trial`.
    const auto apply = [&](const Lease& lease, int sign) {
      std::set<int> gpus;
      for (const GpuRef& ref : lease.gpus) gpus.insert(topology_.Find(ref));
      int before = 0, after = 0;
      for (int g : gpus) before += SpareGpu(trial, g) ? 1 : 0;
      for (const GpuRef& ref : lease.gpus) {
        const int g = topology_.Find(ref);
        if (sign > 0) {
          trial.Give(g, lease.request.slot);
        } else {
          trial.Take(g, lease.request.slot);
        }
      }
      for (int g : gpus) after += SpareGpu(trial, g) ? 1 : 0;
      spare += after - before;
    };
    std::vector<Lease*> chosen;
    for (Lease* lease : candidates) {
      if (spare >= rule.gpus) break;
      int64_t& left = excess[lease->request.team];
      if (left < lease->milli) continue;  // the team's earlier victims used up its excess
      left -= lease->milli;
      apply(*lease, +1);
      chosen.push_back(lease);
    }
    // As few victims as reach the reserve (or, short of it, as many spare GPUs as borrowed work
    // can give): drop the ones not needed, the most expensive first.
    const int reachable = std::min(spare, rule.gpus);
    for (size_t k = chosen.size(); k-- > 0;) {
      apply(*chosen[k], -1);
      if (spare >= reachable) {
        chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
      } else {
        apply(*chosen[k], +1);
      }
    }
    if (chosen.empty()) {
      memo_.RememberFutileRefill(rule.group);
      continue;
    }
    for (Lease* victim : chosen) {
      result.revoked.push_back(Revoke(*victim, RevokeCause::kReclaim, absl::StrCat(kRefillFor, rule.group), now_s));
    }
  }
}

std::vector<ReserveStatus> Scheduler::Reserves() const {
  std::vector<ReserveStatus> out;
  for (const ReserveRule& rule : reserves_.rules()) {
    ReserveStatus s{.group = rule.group, .gpus = rule.gpus, .for_class = rule.for_class,
                    .spare_gpus = reserves_.SpareNow(rule), .group_gpus = static_cast<int>(rule.group_gpus.size())};
    const std::string refill_for = absl::StrCat(kRefillFor, rule.group);
    for (const auto& [id, lease] : leases_) {
      if (lease.revoke_deadline_s.has_value() && lease.revoked_for == refill_for) ++s.refilling_leases;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace gpupool::pool
