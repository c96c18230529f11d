#include "pool/scheduler/quota_ledger.h"

#include <algorithm>

namespace gpupool::pool {
namespace {

// Entries never stay at zero or below: the maps list only teams that hold something.
void Adjust(std::map<std::pair<std::string, std::string>, int64_t>& amounts,
            const std::string& team, const std::string& group, int64_t delta) {
  auto [it, inserted] = amounts.try_emplace({team, group}, 0);
  it->second += delta;
  if (it->second <= 0) amounts.erase(it);
}

}  // namespace

QuotaLedger::QuotaLedger(const SchedulingConfig& config,
                         std::map<std::string, int64_t> group_capacity_milli)
    : config_(&config), capacity_(std::move(group_capacity_milli)) {}

const TeamQuota* QuotaLedger::QuotaOf(const std::string& team, const std::string& group) const {
  const Team* t = config_->FindTeam(team);
  return t == nullptr ? nullptr : t->QuotaFor(group);
}

int64_t QuotaLedger::Usage(const std::string& team, const std::string& group) const {
  auto it = usage_.find({team, group});
  return it == usage_.end() ? 0 : it->second;
}

int64_t QuotaLedger::Committed(const std::string& team, const std::string& group) const {
  auto it = claims_.find({team, group});
  return Usage(team, group) + (it == claims_.end() ? 0 : it->second);
}

int64_t QuotaLedger::Nominal(const std::string& team, const std::string& group) const {
  const TeamQuota* q = QuotaOf(team, group);
  return q == nullptr ? 0 : q->nominal_milli;
}

int64_t QuotaLedger::Borrowed(const std::string& team, const std::string& group) const {
  if (open_pool()) return 0;
  return std::max<int64_t>(0, Usage(team, group) - Nominal(team, group));
}

// The part of `team`'s idle nominal quota others may borrow now.
int64_t QuotaLedger::Lendable(const std::string& team, const std::string& group) const {
  const TeamQuota* q = QuotaOf(team, group);
  if (q == nullptr) return 0;
  int64_t idle = std::max<int64_t>(0, q->nominal_milli - Committed(team, group));
  return std::min(idle, q->lending_limit_milli.value_or(q->nominal_milli));
}

QuotaCheck QuotaLedger::Check(const std::string& team, const std::string& group, int64_t milli,
                              bool may_borrow) const {
  if (open_pool()) return {true, false, WaitReason::kNone};
  if (FitsNominal(team, group, milli)) return {true, false, WaitReason::kNone};
  const int64_t usage = Committed(team, group);
  const int64_t nominal = Nominal(team, group);
  if (!may_borrow) return {false, false, WaitReason::kOverQuota};
  const TeamQuota* q = QuotaOf(team, group);
  if (q != nullptr && q->borrowing_limit_milli.has_value() &&
      usage + milli > nominal + *q->borrowing_limit_milli) {
    return {false, false, WaitReason::kOverQuota};
  }
  // What the cohort can lend: capacity no nominal quota covers, plus other teams' idle nominal
  // quota within their lending limits, minus what others already borrow.
  auto cap = capacity_.find(group);
  int64_t capacity = cap == capacity_.end() ? 0 : cap->second;
  // The other teams' sums: every configured team's, less this team's own share when it is one of
  // them (the scheduler admits configured teams only; the ledger does not rely on it).
  const GroupTotals& totals = TotalsOf(group);
  const bool configured = config_->FindTeam(team) != nullptr;
  const int64_t lendable = totals.lendable - (configured ? Lendable(team, group) : 0);
  const int64_t borrowed_by_others = totals.borrowed - (configured ? Borrowed(team, group) : 0);
  int64_t unowned = std::max<int64_t>(0, capacity - totals.nominal);
  int64_t own_borrow_after = usage + milli - nominal;
  if (own_borrow_after + borrowed_by_others > unowned + lendable) {
    return {false, true, WaitReason::kNoBorrowableCapacity};
  }
  return {true, true, WaitReason::kNone};
}

const QuotaLedger::GroupTotals& QuotaLedger::TotalsOf(const std::string& group) const {
  auto [it, inserted] = totals_.try_emplace(group);
  if (inserted) {
    for (const Team& t : config_->teams) {
      it->second.nominal += Nominal(t.name, group);
      it->second.lendable += Lendable(t.name, group);
      it->second.borrowed += Borrowed(t.name, group);
    }
  }
  return it->second;
}

bool QuotaLedger::FitsNominal(const std::string& team, const std::string& group, int64_t milli) const {
  return Committed(team, group) + milli <= Nominal(team, group);
}

void QuotaLedger::Add(const std::string& team, const std::string& group, int64_t milli) {
  Changed(group);
  Adjust(usage_, team, group, milli);
}

void QuotaLedger::Remove(const std::string& team, const std::string& group, int64_t milli) {
  Changed(group);
  Adjust(usage_, team, group, -milli);
}

void QuotaLedger::Claim(const std::string& team, const std::string& group, int64_t milli) {
  Changed(group);
  Adjust(claims_, team, group, milli);
}

void QuotaLedger::Unclaim(const std::string& team, const std::string& group, int64_t milli) {
  Changed(group);
  Adjust(claims_, team, group, -milli);
}

bool QuotaLedger::EverFits(const std::string& team, int64_t milli, bool may_borrow) const {
  if (open_pool()) return true;
  for (const auto& [group, capacity] : capacity_) {
    const TeamQuota* q = QuotaOf(team, group);
    int64_t nominal = q == nullptr ? 0 : q->nominal_milli;
    int64_t limit = nominal;
    if (may_borrow) {
      limit = q != nullptr && q->borrowing_limit_milli.has_value()
                  ? nominal + *q->borrowing_limit_milli
                  : capacity;
    }
    if (milli <= std::min(limit, capacity)) return true;
  }
  return false;
}

double QuotaLedger::WeightedDominantShare(const std::string& team) const {
  const Team* t = config_->FindTeam(team);
  double weight = t == nullptr ? 1.0 : t->weight;
  double share = 0;
  for (const auto& [key, used] : usage_) {
    if (key.first != team) continue;
    int64_t nominal = Nominal(team, key.second);
    auto cap = capacity_.find(key.second);
    double base = nominal > 0 ? nominal : (cap == capacity_.end() ? 1.0 : cap->second);
    share = std::max(share, used / std::max(base, 1.0));
  }
  return share / weight;
}

}  // namespace gpupool::pool
