#include "pool/scheduler/victim_census.h"

#include <cassert>

#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {

void VictimCensus::Add(const Lease& lease, const PriorityClass& lease_class) {
  if (!lease_class.preemptible) return;
  ++count_[lease.group][lease.request.team][{lease.borrowing, lease_class.value}];
}

void VictimCensus::Remove(const Lease& lease, const PriorityClass& lease_class) {
  if (!lease_class.preemptible) return;
  auto& by_team = count_[lease.group];
  auto& by_kind = by_team[lease.request.team];
  auto it = by_kind.find({lease.borrowing, lease_class.value});
  assert(it != by_kind.end());
  if (it == by_kind.end()) return;
  if (--it->second == 0) by_kind.erase(it);
  if (by_kind.empty()) by_team.erase(lease.request.team);
  if (by_team.empty()) count_.erase(lease.group);
}

bool VictimCensus::AnyCandidate(const std::string& group, const std::string& team,
                                bool guaranteed, int value) const {
  auto by_team = count_.find(group);
  if (by_team == count_.end()) return false;
  for (const auto& [their_team, by_kind] : by_team->second) {
    for (const auto& [kind, n] : by_kind) {
      const auto& [borrowing, their_value] = kind;
      if (their_team == team ? their_value < value : guaranteed && borrowing) return true;
    }
  }
  return false;
}

}  // namespace gpupool::pool
