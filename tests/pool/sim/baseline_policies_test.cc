// The FGD paper's baselines decide as its simulator does: filter by fit, integer scores, min-max
// renormalisation, highest score wins with ties to the smallest node name, and the in-node GPU
// rules (tightest GPU for one GPU, index order for several).
#include <set>

#include "gtest/gtest.h"
#include "pool/placement/baselines.h"
#include "pool/placement/fit.h"
#include "pool/placement/kube_select.h"
#include "tests/pool/sim/test_cluster.h"

namespace gpupool::pool::sim::testing {
namespace {

using placement::ClusterState;
using placement::Decision;

ClusterState Make(std::vector<placement::NodeCapacity> nodes) { return MakeCluster(std::move(nodes)); }

TEST(BestFit, PicksTheNodeLeftWithTheLeastCpuAndGpu) {
  ClusterState state = Make({Node("a", 4), Node("b", 4), Node("c", 2)});
  Use(state, "a", Whole(1), {0});
  Use(state, "b", CpuOnly(1000), {});
  Use(state, "c", CpuOnly(1000), {});
  // Left over after a one-GPU request: a 2 GPUs, b 3 GPUs, c 1 GPU (same CPU everywhere).
  const Decision d = placement::MakeBestFitPolicy()->Decide(state.view(), Whole(1));
  EXPECT_EQ(NameOf(state, d.node), "c");
  EXPECT_EQ(d.gpus, placement::GpuIndices{0});
}

TEST(BestFit, CountsCpuAsMuchAsGpu) {
  // Same GPUs; node "lean" would be left with less CPU.
  ClusterState state = Make({Node("fat", 2, 128000), Node("lean", 2, 16000)});
  const Decision d = placement::MakeBestFitPolicy()->Decide(state.view(), Whole(1, 8000));
  EXPECT_EQ(NameOf(state, d.node), "lean");
}

TEST(BestFit, ANodeThatCountsNoCpuIsJudgedByItsGpus) {
  // "counted" would be left with 7 GPUs and 63 cores, "uncounted" (a pool node that declares no
  // CPU) with 1 GPU: the tighter one, once its CPU no longer looks like 2^50 cores.
  ClusterState state = Make({Node("counted", 8, 64000), Node("uncounted", 2, placement::kUncountedCapacity)});
  Decision d = placement::MakeBestFitPolicy()->Decide(state.view(), Whole(1, 1000));
  EXPECT_EQ(NameOf(state, d.node), "uncounted");
  // A CPU-only request (8 cores): "roomy" (its GPU used, 100 of 128 cores free) would be left with
  // 92 cores, waste 0.36; "busy" (6 of 8 GPUs used, no CPU declared, so its CPU taken as a quarter
  // free, as its GPUs) waste 0.25: "busy" is the tighter. Seen as 2^50 cores, it never was.
  ClusterState cpu = Make({Node("roomy", 1, 128000), Node("busy", 8, placement::kUncountedCapacity)});
  Use(cpu, "roomy", Whole(1, 28000), {0});
  Use(cpu, "busy", Whole(6), {0, 1, 2, 3, 4, 5});
  d = placement::MakeBestFitPolicy()->Decide(cpu.view(), CpuOnly(8000));
  EXPECT_EQ(NameOf(cpu, d.node), "busy");
}

TEST(BestFit, TiesGoToTheSmallestNodeName) {
  ClusterState state = Make({Node("node-b", 2), Node("node-c", 2), Node("node-a", 2)});
  const Decision d = placement::MakeBestFitPolicy()->Decide(state.view(), Share(500));
  EXPECT_EQ(NameOf(state, d.node), "node-a");
}

TEST(KubeSelect, NormalisesMinMaxWithIntegerTruncation) {
  std::vector<int64_t> scores = {63, 56, 69};
  placement::NormalizeMinMax(scores);
  EXPECT_EQ(scores, (std::vector<int64_t>{53, 0, 100}));
  scores = {0, 1, 3};
  placement::NormalizeMinMax(scores);
  EXPECT_EQ(scores, (std::vector<int64_t>{0, 33, 100}));
  scores = {42, 42};
  placement::NormalizeMinMax(scores);
  EXPECT_EQ(scores, (std::vector<int64_t>{0, 0}));
}

TEST(KubeSelect, HighestScoreWinsThenLowestTieRank) {
  ClusterState state = Make({Node("z", 1), Node("y", 1), Node("x", 1)});
  const std::vector<int> nodes = {0, 1, 2};
  EXPECT_EQ(placement::SelectHighest(state.view(), nodes, std::vector<int64_t>{5, 9, 7}), 1);
  EXPECT_EQ(placement::SelectHighest(state.view(), nodes, std::vector<int64_t>{9, 9, 7}), 1);  // "y" < "z"
  EXPECT_EQ(placement::SelectHighest(state.view(), nodes, std::vector<int64_t>{9, 9, 9}), 2);  // "x"
}

TEST(InNodeChoice, OneGpuGoesToTheTightestGpuThatFits) {
  const std::vector<int16_t> free = {1000, 300, 600, 250};
  EXPECT_EQ(placement::TightestGpu(free, 250), 3);
  EXPECT_EQ(placement::TightestGpu(free, 260), 1);
  EXPECT_EQ(placement::TightestGpu(free, 700), 0);
  EXPECT_EQ(placement::TightestGpu(free, 1001), -1);
  const std::vector<int16_t> equal = {600, 600};
  EXPECT_EQ(placement::TightestGpu(equal, 500), 0);
}

TEST(InNodeChoice, MultiGpuTakesFreeGpusInIndexOrder) {
  const std::vector<int16_t> free = {1000, 500, 1000, 1000};
  EXPECT_EQ(placement::DefaultGpuChoice(free, Whole(2)), (placement::GpuIndices{0, 2}));
  EXPECT_EQ(placement::DefaultGpuChoice(free, Whole(3)), (placement::GpuIndices{0, 2, 3}));
  EXPECT_FALSE(placement::GpusFit(free, Whole(4)));
}

TEST(Filter, RespectsCpuMemoryModelAndGpuShare) {
  ClusterState state =
      Make({Node("small-cpu", 2, 4000), Node("small-mem", 2, 64000, "G2", 1024),
            Node("t4", 2, 64000, "T4"), Node("busy", 1)});
  Use(state, "busy", Share(700), {0});
  auto view = state.view();
  placement::PodRequest r = Share(400, 8000, 2048);
  r.models = state.models().ResolveSpec("G2");
  EXPECT_FALSE(placement::NodeFits(view, IndexOf(state, "small-cpu"), r));  // CPU
  EXPECT_FALSE(placement::NodeFits(view, IndexOf(state, "small-mem"), r));  // memory
  EXPECT_FALSE(placement::NodeFits(view, IndexOf(state, "t4"), r));         // model
  EXPECT_FALSE(placement::NodeFits(view, IndexOf(state, "busy"), r));       // 300 left < 400
  EXPECT_FALSE(placement::MakeFirstFitPolicy()->Decide(view, r).placed());
  r.models = state.models().ResolveSpec("V100M16|T4|T4");
  EXPECT_EQ(NameOf(state, placement::MakeFirstFitPolicy()->Decide(view, r).node), "t4");
}

TEST(FirstFit, TakesTheFirstFeasibleNodeByName) {
  ClusterState state = Make({Node("b", 8), Node("a", 1), Node("c", 2)});
  Use(state, "a", Whole(1), {0});
  EXPECT_EQ(NameOf(state, placement::MakeFirstFitPolicy()->Decide(state.view(), Whole(1)).node),
            "b");
  EXPECT_EQ(NameOf(state, placement::MakeFirstFitPolicy()->Decide(state.view(), CpuOnly(1)).node),
            "a");
}

TEST(DotProduct, ANodeThatCountsNoCpuHasItsCpuTakenAsFreeAsItsGpus) {
  // Request (32 cores, 1 GPU). "cpu-rich" (128 cores, 1 GPU free): dot 0.2656; "uncounted" (2 GPUs
  // free of 8, no CPU declared, so its CPU taken as 0.25 free): 0.25 x 0.25 + 0.25 x 0.125 =
  // 0.09375, the smaller. Seen as 2^50 cores free, its dot was the largest there is.
  ClusterState state = Make({Node("cpu-rich", 1, 128000), Node("uncounted", 2, placement::kUncountedCapacity)});
  Decision d = placement::MakeDotProductPolicy()->Decide(state.view(), Whole(1, 32000));
  EXPECT_EQ(NameOf(state, d.node), "uncounted");
  // A CPU-only request (8 cores) does not treat the uncounted node as a perfect fit: "lean" (16
  // cores free) gives 0.125 x 0.0625 = 0.0078; "idle" (8 GPUs free, no CPU declared) 1 x 0.0625.
  ClusterState cpu = Make({Node("lean", 1, 16000), Node("idle", 8, placement::kUncountedCapacity)});
  d = placement::MakeDotProductPolicy()->Decide(cpu.view(), CpuOnly(8000));
  EXPECT_EQ(NameOf(cpu, d.node), "lean");
}

TEST(DotProduct, PrefersTheNodeWhoseFreeCapacityIsLeastAlignedWithTheRequest) {
  // Request (CPU 32 cores, 1 GPU). Node cpu-rich has (128 cores, 1 GPU) free: dot 0.2656;
  // gpu-rich has (32 cores, 8 GPUs) free: dot 0.1875, the smaller, so it scores higher.
  ClusterState state = Make({Node("cpu-rich", 1, 128000), Node("gpu-rich", 8, 32000)});
  const Decision d = placement::MakeDotProductPolicy()->Decide(state.view(), Whole(1, 32000));
  EXPECT_EQ(NameOf(state, d.node), "gpu-rich");
}

TEST(Random, IsDeterministicPerSeedAndOnlyPicksFeasibleNodes) {
  ClusterState state = Make({Node("a", 2), Node("b", 2), Node("c", 2), Node("full", 1)});
  Use(state, "full", Whole(1), {0});
  auto first = placement::MakeRandomPolicy(7);
  auto second = placement::MakeRandomPolicy(7);
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const Decision a = first->Decide(state.view(), Share(300));
    const Decision b = second->Decide(state.view(), Share(300));
    ASSERT_EQ(a.node, b.node);
    ASSERT_EQ(a.gpus, b.gpus);
    seen.insert(NameOf(state, a.node));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b", "c"}));
}

}  // namespace
}  // namespace gpupool::pool::sim::testing
