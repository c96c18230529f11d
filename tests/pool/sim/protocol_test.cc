// The FGD paper's protocol: workload tuning to `tune` x capacity, shuffled arrivals without
// departures, unplaceable pods skipped, results fixed by the seed.
#include <algorithm>
#include <set>

#include "gtest/gtest.h"
#include "pool/placement/random_stream.h"
#include "pool/sim/protocol.h"
#include "pool/sim/workload.h"
#include "tests/pool/sim/test_cluster.h"

namespace gpupool::pool::sim::testing {
namespace {

std::vector<PodSpec> Pods(std::vector<std::pair<int, int>> shapes) {
  std::vector<PodSpec> pods;
  for (auto [num, milli] : shapes) {
    PodSpec p;
    p.name = "pod-" + std::to_string(pods.size());
    p.cpu_milli = 1000;
    p.memory_mib = 1024;
    p.num_gpu = num;
    p.gpu_milli = milli;
    pods.push_back(p);
  }
  return pods;
}

int64_t Demand(const std::vector<PodSpec>& pods, const std::vector<int>& arrivals) {
  int64_t d = 0;
  for (int i : arrivals) d += pods[i].gpu_demand_milli();
  return d;
}

TEST(ProtocolWorkload, InflatesToTheTuneRatioWithDrawsWithReplacement) {
  const auto pods = Pods({{1, 1000}, {1, 500}, {1, 250}, {2, 1000}, {0, 0}});
  const int64_t capacity = 40 * 1000;
  placement::RandomStream random(42);
  const ProtocolWorkload w = BuildProtocolWorkload(pods, capacity, 1.3, random);
  const double target = 1.3 * capacity;
  EXPECT_LE(static_cast<double>(w.demand_milli), target);
  EXPECT_GT(static_cast<double>(w.demand_milli), target - 2000);  // the next draw would pass it
  EXPECT_EQ(w.demand_milli, Demand(pods, w.arrivals));
  EXPECT_EQ(static_cast<int>(w.arrivals.size()), static_cast<int>(pods.size()) + w.appended);
  EXPECT_EQ(w.removed, 0);
  // Every original pod is still there, once at least.
  const std::set<int> present(w.arrivals.begin(), w.arrivals.end());
  EXPECT_EQ(present.size(), pods.size());
}

TEST(ProtocolWorkload, DeflatesByRemovingRandomPods) {
  std::vector<std::pair<int, int>> shapes(100, {1, 1000});
  const auto pods = Pods(shapes);
  placement::RandomStream random(7);
  const ProtocolWorkload w = BuildProtocolWorkload(pods, 50 * 1000, 1.3, random);
  EXPECT_EQ(w.demand_milli, 65 * 1000);
  EXPECT_EQ(w.removed, 35);
  EXPECT_EQ(w.appended, 0);
}

TEST(ProtocolWorkload, ShufflesDeterministicallyPerSeed) {
  std::vector<std::pair<int, int>> shapes(50, {1, 1000});
  const auto pods = Pods(shapes);
  placement::RandomStream a(1), b(1), c(2);
  const auto wa = BuildProtocolWorkload(pods, 50 * 1000, 0, a);
  const auto wb = BuildProtocolWorkload(pods, 50 * 1000, 0, b);
  const auto wc = BuildProtocolWorkload(pods, 50 * 1000, 0, c);
  EXPECT_EQ(wa.arrivals, wb.arrivals);
  EXPECT_NE(wa.arrivals, wc.arrivals);
  std::vector<int> sorted = wa.arrivals;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(RandomStream, DrawsAreUniformInRangeAndReproducible) {
  placement::RandomStream a(99), b(99);
  std::vector<int> counts(5);
  for (int i = 0; i < 5000; ++i) {
    const uint64_t x = a.Below(5);
    ASSERT_EQ(x, b.Below(5));
    ASSERT_LT(x, 5u);
    ++counts[x];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
}

TEST(Protocol, EverythingFitsMeansAllocatedEqualsArrived) {
  const std::vector<placement::NodeCapacity> nodes = {Node("a", 4), Node("b", 4)};
  const auto pods = Pods({{1, 500}, {1, 500}, {1, 500}});  // halves pack 8 GPUs exactly
  ProtocolOptions options;
  options.policy = "best-fit";
  options.seeds = {42, 43};
  options.tune = 1.0;
  auto r = RunProtocol(nodes, pods, options);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const SeedResult& s : r->seeds) {
    EXPECT_EQ(s.workload_demand_milli, 8000);
    EXPECT_EQ(s.placed, s.pods);
  }
  ASSERT_TRUE(r->mean_allocated_pct[100].has_value());
  EXPECT_DOUBLE_EQ(*r->mean_allocated_pct[100], 100.0);
  EXPECT_EQ(r->mean_allocated_pct.size(), 131u);
}

TEST(Protocol, SkipsPodsThatFitNowhere) {
  const std::vector<placement::NodeCapacity> nodes = {Node("a", 2, 64000, "T4")};
  auto pods = Pods({{1, 1000}, {1, 1000}});
  pods[1].gpu_spec = "V100M32";  // no such GPU in the cluster
  ProtocolOptions options;
  options.policy = "first-fit";
  options.seeds = {1};
  options.tune = 0;  // keep the list as it is
  auto r = RunProtocol(nodes, pods, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seeds[0].pods, 2);
  EXPECT_EQ(r->seeds[0].placed, 1);
}

TEST(Protocol, SameSeedSameResult) {
  std::vector<placement::NodeCapacity> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(Node("n" + std::to_string(i), 4));
  const auto pods = Pods({{1, 1000}, {1, 300}, {1, 700}, {1, 450}, {2, 1000}, {4, 1000}});
  for (const char* policy : {"random", "fgd", "gpupool", "best-fit"}) {
    ProtocolOptions options;
    options.policy = policy;
    options.seeds = {5, 6};
    auto a = RunProtocol(nodes, pods, options);
    auto b = RunProtocol(nodes, pods, options);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->mean_allocated_pct, b->mean_allocated_pct) << policy;
    EXPECT_EQ(a->seeds[0].placed, b->seeds[0].placed) << policy;
  }
}

TEST(Protocol, RejectsAnUnknownPolicyNamingTheAllowedOnes) {
  const std::vector<placement::NodeCapacity> nodes = {Node("a", 1)};
  ProtocolOptions options;
  options.policy = "worst-fit";
  auto r = RunProtocol(nodes, Pods({{1, 1000}}), options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("best-fit"), std::string::npos);
}

TEST(Protocol, ShuffledTieOrderIsAlsoDeterministic) {
  std::vector<placement::NodeCapacity> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(Node("n" + std::to_string(i), 2));
  const auto pods = Pods({{1, 1000}, {1, 300}, {1, 700}});
  ProtocolOptions options;
  options.policy = "first-fit";
  options.seeds = {11};
  options.tie_order = TieOrder::kShuffledPerSeed;
  auto a = RunProtocol(nodes, pods, options);
  auto b = RunProtocol(nodes, pods, options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->mean_allocated_pct, b->mean_allocated_pct);
}

}  // namespace
}  // namespace gpupool::pool::sim::testing
