// File: pool/scheduler/quota_ledger.h
//
// How much of each quota group every team uses, and whether one more lease fits the team's
// quota. The pool is one cohort (Kueue's term): capacity no team's nominal quota covers, and
// nominal quota its owner leaves idle (up to the owner's lending limit), may be borrowed.
//
//   QuotaCheck c = ledger.Check("vision", "hopper", /*milli=*/2000, /*may_borrow=*/true);
//   if (c.fits) ... c.borrowing says whether the lease would be preemptible borrowed capacity.
//
// With no teams configured the pool is open: every team is guaranteed whatever capacity exists
// (only placement limits it), which is what a single user on a laptop expects.
// Thread-compatible, with one caveat: Check fills a cache, so even const calls must not run
// concurrently with each other (the head calls the scheduler under one exclusive lock). Owned by
// the Scheduler.
#ifndef GPUPOOL_POOL_SCHEDULER_QUOTA_LEDGER_H_
#define GPUPOOL_POOL_SCHEDULER_QUOTA_LEDGER_H_

#include <cstdint>
#include <map>
#include <string>

#include "pool/config/scheduling_config.h"
#include "pool/scheduler/wait_reason.h"

namespace gpupool::pool {

struct QuotaCheck {
  bool fits = false;
  bool borrowing = false;                  // part of the lease is beyond nominal quota
  WaitReason reason = WaitReason::kNone;   // why it does not fit
};

class QuotaLedger {
 public:
  // `config` must outlive the ledger. `group_capacity_milli`: the pool's capacity per group.
  QuotaLedger(const SchedulingConfig& config, std::map<std::string, int64_t> group_capacity_milli);

  bool open_pool() const { return config_->teams.empty(); }

  // `may_borrow` is false for non-preemptible classes: they run within nominal quota only.
  QuotaCheck Check(const std::string& team, const std::string& group, int64_t milli,
                   bool may_borrow) const;
  // Whether `milli` more keeps the team within its nominal quota: Check's fits && !borrowing,
  // without asking what the cohort could lend.
  bool FitsNominal(const std::string& team, const std::string& group, int64_t milli) const;
  void Add(const std::string& team, const std::string& group, int64_t milli);
  void Remove(const std::string& team, const std::string& group, int64_t milli);
  // Quota promised to a request that revoked victims to run within its team's nominal quota and
  // waits for them to stop. Check counts it as used (the team's other requests cannot be promised
  // the same room, and none of it is lent), Usage does not (no lease holds it yet). Without it,
  // many requests of one team could each reclaim "within nominal" in one cycle, then be admitted
  // as borrowers and be reclaimed in turn: a preemption loop.
  void Claim(const std::string& team, const std::string& group, int64_t milli);
  void Unclaim(const std::string& team, const std::string& group, int64_t milli);

  int64_t Usage(const std::string& team, const std::string& group) const;
  int64_t Nominal(const std::string& team, const std::string& group) const;
  // Usage beyond nominal (what owners may reclaim).
  int64_t Borrowed(const std::string& team, const std::string& group) const;
  // Whether the most `milli` a request could ever get is within the team's nominal + borrowing
  // limit in some group (false: the request can never be admitted).
  bool EverFits(const std::string& team, int64_t milli, bool may_borrow) const;
  // Weighted dominant share: max over groups of usage / nominal (or / group capacity where the
  // team has no nominal quota), divided by the team's fair-share weight.
  double WeightedDominantShare(const std::string& team) const;

 private:
  const TeamQuota* QuotaOf(const std::string& team, const std::string& group) const;
  int64_t Lendable(const std::string& team, const std::string& group) const;
  int64_t Committed(const std::string& team, const std::string& group) const;  // usage + claims
  // Sums over every team of a group, what a borrowing check weighs: recomputed (one pass over
  // the teams) only after a usage or claim of the group changed, since a cycle checks many
  // requests between two changes.
  struct GroupTotals {
    int64_t nominal = 0;
    int64_t lendable = 0;
    int64_t borrowed = 0;
  };
  const GroupTotals& TotalsOf(const std::string& group) const;
  void Changed(const std::string& group) { totals_.erase(group); }

  const SchedulingConfig* config_;
  std::map<std::string, int64_t> capacity_;                     // group -> milli
  std::map<std::pair<std::string, std::string>, int64_t> usage_;  // (team, group) -> milli
  std::map<std::pair<std::string, std::string>, int64_t> claims_; // (team, group) -> milli
  mutable std::map<std::string, GroupTotals> totals_;            // group -> sums, while valid
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_QUOTA_LEDGER_H_
