// The quota ledger's borrowing verdict (quota_ledger.h) against the cohort's rule computed from
// scratch, after random grants, releases, claims and unclaims: the ledger caches per-group sums
// over the teams, and a stale sum would admit a borrower the cohort cannot lend to (or refuse
// one it can).
#include "pool/scheduler/quota_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpupool::pool {
namespace {

struct Model {
  const SchedulingConfig* config;
  std::map<std::string, int64_t> capacity;
  std::map<std::pair<std::string, std::string>, int64_t> usage, claims;

  const TeamQuota* Quota(const std::string& team, const std::string& group) const {
    const Team* t = config->FindTeam(team);
    return t == nullptr ? nullptr : t->QuotaFor(group);
  }
  int64_t Nominal(const std::string& team, const std::string& group) const {
    const TeamQuota* q = Quota(team, group);
    return q == nullptr ? 0 : q->nominal_milli;
  }
  int64_t Get(const std::map<std::pair<std::string, std::string>, int64_t>& m, const std::string& team,
              const std::string& group) const {
    auto it = m.find({team, group});
    return it == m.end() ? 0 : it->second;
  }
  // The rule, term by term, as Kueue's cohort lends.
  QuotaCheck Check(const std::string& team, const std::string& group, int64_t milli) const {
    const int64_t committed = Get(usage, team, group) + Get(claims, team, group);
    const int64_t nominal = Nominal(team, group);
    if (committed + milli <= nominal) return {true, false, WaitReason::kNone};
    const TeamQuota* q = Quota(team, group);
    if (q != nullptr && q->borrowing_limit_milli && committed + milli > nominal + *q->borrowing_limit_milli) {
      return {false, false, WaitReason::kOverQuota};
    }
    int64_t nominal_total = 0, lendable = 0, borrowed = 0;
    for (const Team& t : config->teams) {
      nominal_total += Nominal(t.name, group);
      if (t.name == team) continue;
      if (const TeamQuota* tq = Quota(t.name, group)) {
        const int64_t idle = std::max<int64_t>(0, tq->nominal_milli - Get(usage, t.name, group) - Get(claims, t.name, group));
        lendable += std::min(idle, tq->lending_limit_milli.value_or(tq->nominal_milli));
      }
      borrowed += std::max<int64_t>(0, Get(usage, t.name, group) - Nominal(t.name, group));
    }
    const int64_t unowned = std::max<int64_t>(0, capacity.at(group) - nominal_total);
    if (committed + milli - nominal + borrowed > unowned + lendable) {
      return {false, true, WaitReason::kNoBorrowableCapacity};
    }
    return {true, true, WaitReason::kNone};
  }
};

TEST(QuotaLedger, BorrowingVerdictsMatchTheCohortRuleAfterRandomChanges) {
  SchedulingConfig config;
  const std::vector<std::string> groups = {"hopper", "ada"};
  for (int t = 0; t < 5; ++t) {
    Team team{.name = absl::StrCat("t", t)};
    for (const std::string& g : groups) {
      if ((t + g.size()) % 3 == 0) continue;  // some teams have no quota in some groups
      TeamQuota q{.group = g, .nominal_milli = 1000 * (1 + t % 3)};
      if (t % 2 == 0) q.borrowing_limit_milli = 3000;
      if (t % 4 == 1) q.lending_limit_milli = 500;
      team.quotas.push_back(q);
    }
    config.teams.push_back(team);
  }
  const std::map<std::string, int64_t> capacity = {{"hopper", 16000}, {"ada", 8000}};
  QuotaLedger ledger(config, capacity);
  Model model{&config, capacity, {}, {}};
  std::mt19937_64 rng(5);
  int borrowing_seen = 0, refused_seen = 0;
  for (int step = 0; step < 1500; ++step) {
    const std::string team = absl::StrCat("t", rng() % 6);
    const std::string& group = groups[rng() % 2];
    const int64_t milli = 250 * static_cast<int64_t>(1 + rng() % 8);
    auto& usage = model.usage[{team, group}];
    auto& claims = model.claims[{team, group}];
    switch (rng() % 4) {
      case 0: ledger.Add(team, group, milli); usage += milli; break;
      case 1: if (usage >= milli) { ledger.Remove(team, group, milli); usage -= milli; } break;
      case 2: ledger.Claim(team, group, milli); claims += milli; break;
      case 3: if (claims >= milli) { ledger.Unclaim(team, group, milli); claims -= milli; } break;
    }
    // t5 is no configured team: the ledger must not count it among "the other teams" twice.
    for (int t = 0; t < 6; ++t) {
      const std::string name = absl::StrCat("t", t);
      for (const std::string& g : groups) {
        // Every size up to the group's capacity, so each step's verdicts cross the boundary.
        for (int64_t ask = 250; ask <= capacity.at(g); ask += 250) {
          const QuotaCheck got = ledger.Check(name, g, ask, /*may_borrow=*/true);
          const QuotaCheck want = model.Check(name, g, ask);
          ASSERT_EQ(got.fits, want.fits) << "step " << step << " " << name << " " << g << " " << ask;
          ASSERT_EQ(got.borrowing, want.borrowing) << "step " << step << " " << name << " " << g << " " << ask;
          ASSERT_EQ(got.reason, want.reason) << "step " << step << " " << name << " " << g << " " << ask;
          borrowing_seen += got.fits && got.borrowing;
          refused_seen += got.reason == WaitReason::kNoBorrowableCapacity;
        }
      }
    }
  }
  // Both verdicts of the cohort rule were exercised, not only "within nominal".
  EXPECT_GT(borrowing_seen, 100);
  EXPECT_GT(refused_seen, 100);
}

}  // namespace
}  // namespace gpupool::pool
