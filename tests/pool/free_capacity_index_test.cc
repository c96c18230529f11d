// The free-capacity index must place exactly as the scanning placement does (PlaceRequest, the
// reference): same GPUs, same order, same failures, after any sequence of carves, releases,
// health changes and reservations.
#include "pool/scheduler/free_capacity_index.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "pool/config/pool_config.h"
#include "pool/devices/simulated_driver.h"
#include "pool/scheduler/placement.h"

namespace gpupool::pool {
namespace {

// Nodes of several shapes: two NVLink islands per node, one island per node, and mixed models
// (L4 has no NVLink: each of its GPUs is an island of its own; the H100s there are a subset of
// their node, so the node's score counts GPUs outside the candidate set).
constexpr char kMixedPool[] = R"(
nodes:
  - name: split
    count: 3
    gpus: [{model: H100-80GB, count: 4, nvlink_island: x}, {model: H100-80GB, count: 4, nvlink_island: y}]
  - name: full
    count: 3
    gpus: [{model: H100-80GB, count: 8}]
  - name: mixed
    count: 2
    gpus: [{model: L4, count: 2}, {model: H100-80GB, count: 2}]
)";

class World {
 public:
  explicit World(const char* yaml) {
    config_ = ParsePoolConfig(yaml, "test.yaml").value();
    auto driver = SimulatedDriver::Create(*config_.simulated_nodes).value();
    inventory_ = std::make_unique<Inventory>(
        Inventory::FromDiscovery(driver->Discover().value()).value());
    topology_ = std::make_unique<PoolTopology>(*inventory_, config_.scheduling);
    state_ = std::make_unique<CapacityState>(*topology_);
  }
  const PoolTopology& topology() const { return *topology_; }
  CapacityState& state() { return *state_; }
  // The GPUs of the group of `model`, ascending, as the scheduler's eligibility lists them.
  std::vector<int> Group(const char* model) const {
    std::vector<int> out;
    std::string group = config_.scheduling.GroupOf(model);
    for (size_t g = 0; g < topology_->gpus().size(); ++g) {
      if (topology_->gpus()[g].group == group) out.push_back(static_cast<int>(g));
    }
    return out;
  }

 private:
  PoolConfig config_;
  std::unique_ptr<Inventory> inventory_;
  std::unique_ptr<PoolTopology> topology_;
  std::unique_ptr<CapacityState> state_;
};

LeaseRequest RandomRequest(std::mt19937_64& rng) {
  LeaseRequest r;
  r.id = "r";
  r.team = "t";
  static const int kCompute[] = {100, 250, 333, 500, 750, 1000};
  static const int64_t kMemory[] = {256, 8000, 20000, 40000, 70000};
  if (rng() % 2 == 0) r.slot = SlotShape::Fraction(kMemory[rng() % 5], kCompute[rng() % 6]);
  static const GangTopology kTopologies[] = {GangTopology::kAny, GangTopology::kSameNode,
                                             GangTopology::kSameNvLinkIsland};
  r.topology = kTopologies[rng() % 3];
  static const int kCounts[] = {1, 1, 2, 3, 4, 8};
  r.slot_count = kCounts[rng() % 6];
  if (rng() % 3 == 0) r.runtime_estimate_s = 100 + static_cast<int64_t>(rng() % 1000);
  return r;
}

PlacementOptions RandomOptions(std::mt19937_64& rng) {
  PlacementOptions o;
  o.ignore_health = rng() % 4 == 0;
  o.ignore_reservations = rng() % 4 == 0;
  o.ignore_gang_reservations = rng() % 4 == 0;
  o.now_s = static_cast<int64_t>(rng() % 1000);
  o.owner = rng() % 4;  // 0: no reservation of its own
  return o;
}

int64_t BruteSchedulableFree(World& w, const std::vector<int>& candidates) {
  int64_t free = 0;
  for (int g : candidates) {
    if (w.state()[g].schedulable) free += w.state()[g].compute_free_milli;
  }
  return free;
}

// Random carves and releases (whole GPUs and fractions), health flips, gang reservations and
// room held for a request (a preemption's Share, any part of a GPU); after each, random requests
// are placed both ways.
void AgreeWithScanAfterRandomChanges(const char* model, uint64_t seed, int* answered) {
  World w(kMixedPool);
  std::vector<int> candidates = w.Group(model);
  FreeCapacityIndex index(w.topology(), candidates, w.state());
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int, SlotShape>> carved;
  std::vector<std::pair<int, Share>> held;
  const int gpus = w.state().size();
  for (int step = 0; step < 3000; ++step) {
    int g = static_cast<int>(rng() % gpus);
    uint64_t what = rng() % 10;
    if (what < 4) {
      SlotShape shape = rng() % 3 == 0 ? SlotShape{} : SlotShape::Fraction(8000, 250);
      if (w.state().Fits(g, shape)) {
        w.state().Take(g, shape);
        carved.emplace_back(g, shape);
      }
    } else if (what < 7 && !carved.empty()) {
      size_t i = rng() % carved.size();
      g = carved[i].first;
      w.state().Give(g, carved[i].second);
      carved.erase(carved.begin() + static_cast<long>(i));
    } else if (what == 7) {
      w.state()[g].schedulable = rng() % 3 != 0;
    } else if (what == 8) {
      if (rng() % 2 == 0 && !held.empty()) {
        size_t i = rng() % held.size();
        g = held[i].first;
        w.state().GiveShare(g, held[i].second);
        held.erase(held.begin() + static_cast<long>(i));
      } else {
        Share part = w.state().FreePart(
            g, {.compute_milli = static_cast<int>(rng() % 1001), .memory_mib = static_cast<int64_t>(rng() % 90000)});
        w.state().TakeShare(g, part);
        held.emplace_back(g, part);
      }
    } else {
      w.state()[g].gang_reserved_for = rng() % 2 == 0 ? 0 : 1 + rng() % 3;
      w.state()[g].gang_reserved_until_s = static_cast<int64_t>(rng() % 2000);
    }
    index.RefreshNode(w.state(), w.topology().gpus()[g].node);
    ASSERT_EQ(index.SchedulableFreeMilli(), BruteSchedulableFree(w, candidates)) << "step " << step;
    for (int q = 0; q < 4; ++q) {
      LeaseRequest r = RandomRequest(rng);
      PlacementOptions options = RandomOptions(rng);
      if (!index.Answers(r, options)) continue;
      ++*answered;
      ASSERT_EQ(index.Place(w.state(), r, options),
                PlaceRequest(w.topology(), w.state(), r, candidates, options))
          << "step " << step << ": " << r.slot_count << " x " << r.slot.ToString() << " ("
          << GangTopologyName(r.topology) << ")";
    }
  }
}

TEST(FreeCapacityIndex, AgreesWithTheScanAfterRandomCarvesReleasesHealthAndReservations) {
  int answered = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    AgreeWithScanAfterRandomChanges("H100-80GB", seed, &answered);
    AgreeWithScanAfterRandomChanges("L4", seed, &answered);
  }
  EXPECT_GT(answered, 30000);  // the comparison is not vacuous
}

TEST(FreeCapacityIndex, FirstFitAndMultiSlotFractionsAnywhereAreLeftToTheScan) {
  World w(kMixedPool);
  FreeCapacityIndex index(w.topology(), w.Group("H100-80GB"), w.state());
  LeaseRequest r;
  r.slot_count = 2;
  EXPECT_TRUE(index.Answers(r, {}));
  EXPECT_FALSE(index.Answers(r, {.first_fit = true}));
  r.slot = SlotShape::Fraction(8000, 250);
  EXPECT_FALSE(index.Answers(r, {}));
  r.topology = GangTopology::kSameNode;
  EXPECT_TRUE(index.Answers(r, {}));
}

TEST(FreeCapacityIndex, InterleavedIslandsAreLeftToTheScan) {
  World w(R"(
nodes:
  - name: n
    count: 2
    gpus: [{model: H100-80GB, count: 2, nvlink_island: x}, {model: H100-80GB, count: 2, nvlink_island: y},
           {model: H100-80GB, count: 2, nvlink_island: x}]
)");
  FreeCapacityIndex index(w.topology(), w.Group("H100-80GB"), w.state());
  LeaseRequest r;
  r.slot_count = 2;
  r.topology = GangTopology::kSameNvLinkIsland;
  EXPECT_FALSE(index.Answers(r, {}));
  r.topology = GangTopology::kSameNode;
  EXPECT_TRUE(index.Answers(r, {}));
}

}  // namespace
}  // namespace gpupool::pool
