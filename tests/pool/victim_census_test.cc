// The victim census must say "some victim exists" exactly when a walk over the leases finds one.
#include "pool/scheduler/victim_census.h"

#include <gtest/gtest.h>

#include <random>
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

bool BruteAnyCandidate(const std::vector<Held>& held, const std::string& group,
                       const std::string& team, bool guaranteed, int value) {
  for (const Held& h : held) {
    if (!h.counted || !h.cls.preemptible || h.lease.group != group) continue;
    if (guaranteed && h.lease.request.team != team && h.lease.borrowing) return true;
    if (h.lease.request.team == team && h.cls.value < value) return true;
  }
  return false;
}

TEST(VictimCensus, AgreesWithAWalkOverLeasesAfterRandomGrantsRevocationsAndReleases) {
  std::mt19937_64 rng(7);
  VictimCensus census;
  std::vector<Held> held;
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
      census.Add(h.lease, h.cls);
      held.push_back(h);
    } else if (what < 7) {
      Held& h = held[rng() % held.size()];
      if (h.counted) census.Remove(h.lease, h.cls);  // revoked
      h.counted = false;
    } else {
      size_t i = rng() % held.size();
      if (held[i].counted) census.Remove(held[i].lease, held[i].cls);  // released
      held.erase(held.begin() + static_cast<long>(i));
    }
    for (const char* group : {"hopper", "ada", "volta"}) {
      for (int t = 0; t < 3; ++t) {
        for (bool guaranteed : {false, true}) {
          for (int value : {100, 150, 200, 300}) {
            std::string team = absl::StrCat("t", t);
            ASSERT_EQ(census.AnyCandidate(group, team, guaranteed, value),
                      BruteAnyCandidate(held, group, team, guaranteed, value))
                << "step " << step << " " << group << " " << team << " " << guaranteed << " "
                << value;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpupool::pool
