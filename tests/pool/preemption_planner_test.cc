// The preemption planner (preemption_planner.h) on its own: which victims it chooses for a
// request that needs a given amount of room, with fitting decided by the freed GPUs alone.
#include "pool/scheduler/preemption_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpupool::pool {
namespace {

// Fits when the freed candidates hold at least `need` GPUs together.
struct NeedGpus {
  const std::vector<PreemptionCandidate>* candidates;
  size_t need;
  int* calls;
  bool operator()(const std::vector<size_t>& freed) const {
    ++*calls;
    size_t gpus = 0;
    for (size_t i : freed) gpus += (*candidates)[i].gpus;
    return gpus >= need;
  }
};

TEST(PreemptionPlanner, ChoosesTheLeastWorkLostThenTheFewestVictims) {
  std::vector<PreemptionCandidate> c = {
      {.cost = 50, .gpus = 1, .id = "a"}, {.cost = 10, .gpus = 1, .id = "b"},
      {.cost = 10, .gpus = 2, .id = "c"}, {.cost = 900, .gpus = 4, .id = "d"},
  };
  int calls = 0;
  // Two GPUs: c (cost 10, 2 GPUs) alone, before b (cost 10, 1 GPU) and a.
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 2, &calls}), (std::vector<size_t>{2}));
  // Three GPUs: c and b (cost 20), not d (900).
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 3, &calls}), (std::vector<size_t>{2, 1}));
  // Eight: more than every candidate holds.
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 9, &calls}), std::nullopt);
  EXPECT_EQ(PlanPreemption({}, 0, NeedGpus{&c, 1, &calls}), std::nullopt);
}

TEST(PreemptionPlanner, DropsVictimsThatTurnOutUnnecessary) {
  // Cheapest first needs a, b, c and then the big one; once d is in, a..c are not needed.
  std::vector<PreemptionCandidate> c = {
      {.cost = 1, .gpus = 1, .id = "a"}, {.cost = 2, .gpus = 1, .id = "b"},
      {.cost = 3, .gpus = 1, .id = "c"}, {.cost = 4, .gpus = 8, .id = "d"},
  };
  int calls = 0;
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 8, &calls}), (std::vector<size_t>{3}));
}

TEST(PreemptionPlanner, TakesCandidatesMarkedLastOnlyAfterAllOthers) {
  std::vector<PreemptionCandidate> c = {
      {.cost = 1, .gpus = 1, .id = "urgent", .last = true}, {.cost = 99, .gpus = 1, .id = "training"},
  };
  int calls = 0;
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 1, &calls}), (std::vector<size_t>{1}));
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 2, &calls}), (std::vector<size_t>{1, 0}));
}

TEST(PreemptionPlanner, FreesTheTeamsOwnQuotaWhenThatIsWhatBlocks) {
  // The other team's borrowed lease is cheaper and frees room, but not the team's own quota.
  std::vector<PreemptionCandidate> c = {
      {.cost = 1, .gpus = 1, .id = "theirs", .own_milli = 0},
      {.cost = 5, .gpus = 1, .id = "ours", .own_milli = 1000},
  };
  int calls = 0;
  EXPECT_EQ(PlanPreemption(c, 0, NeedGpus{&c, 1, &calls}), (std::vector<size_t>{0}));
  EXPECT_EQ(PlanPreemption(c, 1000, NeedGpus{&c, 1, &calls}), (std::vector<size_t>{1}));
  EXPECT_EQ(PlanPreemption(c, 2000, NeedGpus{&c, 1, &calls}), std::nullopt);
}

// On random candidates: the plan fits, is minimal (no victim can be dropped), and loses no more
// work than the shortest fitting prefix of the cheapest-first order. The search is a bisection,
// so it asks about log2(n) questions, plus one per victim it considers dropping.
TEST(PreemptionPlanner, PlansFitAreMinimalAndBisectionAsksFewQuestions) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 300; ++round) {
    const size_t n = 1 + rng() % 40;
    std::vector<std::string> ids;
    std::vector<PreemptionCandidate> c;
    for (size_t i = 0; i < n; ++i) ids.push_back(absl::StrCat("l", i));
    for (size_t i = 0; i < n; ++i) {
      c.push_back({.cost = static_cast<double>(rng() % 100), .gpus = 1 + rng() % 4, .id = ids[i]});
    }
    size_t total = 0;
    for (const auto& x : c) total += x.gpus;
    const size_t need = 1 + rng() % (total + 2);
    int calls = 0;
    NeedGpus fits{&c, need, &calls};
    std::optional<std::vector<size_t>> plan = PlanPreemption(c, 0, fits);
    int unused = 0;
    NeedGpus check{&c, need, &unused};
    if (need > total) {
      EXPECT_EQ(plan, std::nullopt);
      continue;
    }
    ASSERT_TRUE(plan.has_value()) << round;
    EXPECT_TRUE(check(*plan));
    for (size_t k = 0; k < plan->size(); ++k) {
      std::vector<size_t> without = *plan;
      without.erase(without.begin() + static_cast<long>(k));
      EXPECT_FALSE(check(without)) << "victim " << (*plan)[k] << " was not needed, round " << round;
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (c[a].cost != c[b].cost) return c[a].cost < c[b].cost;
      if (c[a].gpus != c[b].gpus) return c[a].gpus > c[b].gpus;
      return c[a].id < c[b].id;
    });
    double prefix_cost = 0, plan_cost = 0;
    size_t held = 0, prefix_length = 0;
    for (size_t i : order) {
      if (held >= need) break;
      held += c[i].gpus;
      prefix_cost += c[i].cost;
      ++prefix_length;
    }
    for (size_t i : *plan) plan_cost += c[i].cost;
    EXPECT_LE(plan_cost, prefix_cost) << round;
    // One question for all, log2(n) for the bisection, one per victim of the shortest prefix.
    EXPECT_LE(calls, 1 + static_cast<int>(std::ceil(std::log2(n + 1))) + static_cast<int>(prefix_length))
        << round;
  }
}

}  // namespace
}  // namespace gpupool::pool
