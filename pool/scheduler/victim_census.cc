#include "pool/scheduler/victim_census.h"

#include <cassert>

namespace gpupool::pool {

void VictimCensus::Add(const Lease& lease, const PriorityClass& lease_class) {
  if (!lease_class.preemptible) return;
  index_[lease.group][lease.request.team][{lease.borrowing, lease_class.value}][lease.id] = &lease;
}

void VictimCensus::Remove(const Lease& lease, const PriorityClass& lease_class) {
  if (!lease_class.preemptible) return;
  auto& by_team = index_[lease.group];
  auto& by_kind = by_team[lease.request.team];
  auto it = by_kind.find({lease.borrowing, lease_class.value});
  assert(it != by_kind.end() && it->second.count(lease.id) == 1);
  if (it == by_kind.end()) return;
  it->second.erase(lease.id);
  if (it->second.empty()) by_kind.erase(it);
  if (by_kind.empty()) by_team.erase(lease.request.team);
  if (by_team.empty()) index_.erase(lease.group);
}

bool VictimCensus::AnyCandidate(const std::string& group, const std::string& team,
                                bool guaranteed, int value) const {
  auto by_team = index_.find(group);
  if (by_team == index_.end()) return false;
  for (const auto& [their_team, by_kind] : by_team->second) {
    for (const auto& [kind, leases] : by_kind) {
      if (CauseFor(their_team, kind.first, kind.second, team, guaranteed, value)) return true;
    }
  }
  return false;
}

}  // namespace gpupool::pool
