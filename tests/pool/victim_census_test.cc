// The victim census must say "some victim exists" exactly when a walk over the leases finds one,
// and hand out exactly the leases (with their causes) that walk finds.
#include "pool/scheduler/victim_census.h"

#include <gtest/gtest.h>

#include <list>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pool/scheduler/scheduler.h"

namespace gpupool::pool {
namespace {

struct Held {
  Lease lease;
  PriorityClass cls;
  bool counted = true;  // not revoked yet
};

// (lease id, cause) of every candidate, by a walk over all leases.
std::set<std::pair<std::string, RevokeCause>> BruteCandidates(const std::list<Held>& held,
                                                               const std::string& group,
                                                               const std::string& team,
                                                               bool guaranteed, int value) {
  std::set<std::pair<std::string, RevokeCause>> found;
  for (const Held& h : held) {
    if (!h.counted || !h.cls.preemptible || h.lease.group != group) continue;
    if (guaranteed && h.lease.request.team != team && h.lease.borrowing) {
      found.insert({h.lease.id, RevokeCause::kReclaim});
    }
    if (h.lease.request.team == team && h.cls.value < value) found.insert({h.lease.id, RevokeCause::kPriority});
  }
  return found;
}

TEST(VictimCensus, AgreesWithAWalkOverLeasesAfterRandomGrantsRevocationsAndReleases) {
  std::mt19937_64 rng(7);
  VictimCensus census;
  std::list<Held> held;  // the census keeps pointers: leases must not move
  const PriorityClass classes[] = {{"inference", 300, false}, {"training", 200, true},
                                   {"experiment", 100, true}};
  for (int step = 0; step < 5000; ++step) {
    uint64_t what = rng() % 10;
    if (what < 5 || held.empty()) {
      Held h;
      h.lease.id = absl::StrCat("l", step);
      h.lease.group = rng() % 2 ? "hopper" : "ada";
      h.lease.request.team = absl::StrCat("t", rng() % 3);
      h.lease.borrowing = rng() % 2;
      h.cls = classes[rng() % 3];
      held.push_back(h);
      census.Add(held.back().lease, held.back().cls);
    } else if (what < 7) {
      Held& h = *std::next(held.begin(), static_cast<long>(rng() % held.size()));
      if (h.counted) census.Remove(h.lease, h.cls);  // revoked
      h.counted = false;
    } else {
      auto it = std::next(held.begin(), static_cast<long>(rng() % held.size()));
      if (it->counted) census.Remove(it->lease, it->cls);  // released
      held.erase(it);
    }
    for (const char* group : {"hopper", "ada", "volta"}) {
      for (int t = 0; t < 3; ++t) {
        for (bool guaranteed : {false, true}) {
          for (int value : {100, 150, 200, 300}) {
            std::string team = absl::StrCat("t", t);
            const auto expected = BruteCandidates(held, group, team, guaranteed, value);
            std::set<std::pair<std::string, RevokeCause>> listed;
            census.ForEachCandidate(group, team, guaranteed, value, [&](const Lease& lease, RevokeCause cause) {
              EXPECT_TRUE(listed.insert({lease.id, cause}).second) << "listed twice: " << lease.id;
            });
            ASSERT_EQ(census.AnyCandidate(group, team, guaranteed, value), !expected.empty())
                << "step " << step << " " << group << " " << team << " " << guaranteed << " "
                << value;
            ASSERT_EQ(listed, expected) << "step " << step << " " << group << " " << team;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpupool::pool
