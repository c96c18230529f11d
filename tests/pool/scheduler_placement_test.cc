// The live scheduler's placement: host CPU and memory beside GPUs, and the placement policy
// (SchedulerOptions::placement_policy) choosing where single-node requests go.
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "pool/scheduler/scheduler.h"
#include "tests/pool/scheduler_pool.h"

namespace gpupool::pool {
namespace {

// Two nodes of 4 H100 each, 32 cores and 256 GiB of host memory each, and an open pool.
constexpr char kHostNodes[] = R"(
nodes:
  - name: a
    cpus: 32
    memory_gib: 256
    gpus: [{model: H100-80GB, count: 4}]
  - name: b
    cpus: 32
    memory_gib: 256
    gpus: [{model: H100-80GB, count: 4}]
)";

LeaseRequest Whole(const std::string& id, int gpus, int64_t cpu_milli_per_gpu = 0) {
  LeaseRequest r;
  r.id = id;
  r.team = "t";
  r.slot_count = gpus;
  r.slot.cpu_milli = cpu_milli_per_gpu;
  if (gpus > 1) r.topology = GangTopology::kSameNode;
  return r;
}

// CPU and host memory on some GPU's node, nothing of the GPU.
LeaseRequest HostOnly(const std::string& id, int64_t cpu_milli, int64_t memory_mib) {
  LeaseRequest r;
  r.id = id;
  r.team = "t";
  r.slot = SlotShape::HostOnly(cpu_milli, memory_mib);
  return r;
}

std::set<std::string> NodesOf(const Scheduler& s) {
  std::set<std::string> nodes;
  for (const auto& [id, lease] : s.leases()) {
    for (const GpuRef& g : lease.gpus) nodes.insert(g.node);
  }
  return nodes;
}

class SchedulerPlacement : public ::testing::TestWithParam<std::string> {
 protected:
  SchedulerOptions Options() const {
    SchedulerOptions o;
    o.placement_policy = GetParam();
    return o;
  }
};

TEST_P(SchedulerPlacement, HostCpuOfANodeLimitsWhatItTakes) {
  Pool pool(kHostNodes, Options());
  // 3 GPUs at 10 cores each fill node a's 32 cores: a fourth GPU there would need 40.
  ASSERT_TRUE(pool.s().Submit(Whole("first", 3, 10000), 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  ASSERT_TRUE(pool.s().Submit(Whole("second", 1, 10000), 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  EXPECT_EQ(NodesOf(pool.s()), (std::set<std::string>{"a", "b"}))
      << "the node with GPUs free but no CPU left cannot take the second request";
  // Node b has 22 cores left: a 3-GPU request at 10 cores per GPU fits nowhere now.
  ASSERT_TRUE(pool.s().Submit(Whole("third", 3, 10000), 0).ok());
  EXPECT_TRUE(pool.s().Schedule(0).granted.empty());
  EXPECT_EQ(pool.ReasonOf("third"), WaitReason::kNoHostCapacity);
}

TEST_P(SchedulerPlacement, MoreCpuThanAnyNodeHasIsRefusedAtSubmission) {
  Pool pool(kHostNodes, Options());
  absl::StatusOr<std::string> id = pool.s().Submit(Whole("huge", 2, 20000), 0);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(id.status().message().find("does not fit even in the empty pool"), std::string::npos)
      << id.status();
}

TEST_P(SchedulerPlacement, ReleasedHostCapacityComesBack) {
  Pool pool(kHostNodes, Options());
  ASSERT_TRUE(pool.s().Submit(Whole("x", 4, 8000), 0).ok());
  ASSERT_TRUE(pool.s().Submit(Whole("y", 4, 8000), 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 2u);
  ASSERT_TRUE(pool.s().Submit(Whole("z", 1, 1000), 0).ok());
  EXPECT_TRUE(pool.s().Schedule(0).granted.empty());
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("x"), 1).ok());
  EXPECT_EQ(pool.s().Schedule(1).granted.size(), 1u);
}

TEST_P(SchedulerPlacement, HostOnlySlotsTakeCpuButLeaveTheGpuWhole) {
  Pool pool(kHostNodes, Options());
  ASSERT_TRUE(pool.s().Submit(HostOnly("cpu", 30000, 1024), 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  const std::string cpu_node = *NodesOf(pool.s()).begin();
  // All eight GPUs are still whole: a 4-GPU request without CPU fits on either node.
  ASSERT_TRUE(pool.s().Submit(Whole("gang-1", 4), 0).ok());
  ASSERT_TRUE(pool.s().Submit(Whole("gang-2", 4), 0).ok());
  EXPECT_EQ(pool.s().Schedule(0).granted.size(), 2u);
  // ... but that node's CPU is gone for GPU work that needs it.
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("gang-1"), 1).ok());
  ASSERT_TRUE(pool.s().Release(pool.LeaseOf("gang-2"), 1).ok());
  ASSERT_TRUE(pool.s().Submit(Whole("needs-cpu", 1, 4000), 1).ok());
  ASSERT_EQ(pool.s().Schedule(1).granted.size(), 1u);
  std::set<std::string> nodes = NodesOf(pool.s());
  EXPECT_EQ(nodes.size(), 2u) << "the GPU task with CPU went to the other node than " << cpu_node;
}

TEST_P(SchedulerPlacement, AHostOnlySlotMustAskForSomething) {
  Pool pool(kHostNodes, Options());
  absl::StatusOr<std::string> id = pool.s().Submit(HostOnly("nothing", 0, 0), 0);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
}

// Regression: the policy resolved model names exactly while the filter reads the catalogue's in
// any case, so "h100-80gb" had candidates that the policy then refused: it waited forever.
TEST_P(SchedulerPlacement, ACatalogueModelNamedInAnotherCaseIsPlaced) {
  Pool pool(kHostNodes, Options());
  LeaseRequest r = Whole("lower", 1);
  r.allowed_models = {"h100-80gb"};
  ASSERT_TRUE(pool.s().Submit(r, 0).ok());
  EXPECT_EQ(pool.s().Schedule(0).granted.size(), 1u);
}

// A lease taken back after a restart keeps running even if its node now declares less CPU than
// it holds; new work on that node waits until there is room again.
TEST_P(SchedulerPlacement, AdoptedLeasesKeepTheirHostShareWhenTheNodeShrank) {
  Pool pool(kHostNodes, Options());
  LeaseRequest big = Whole("big", 2, 20000);  // 40 cores on a node of 32
  ASSERT_TRUE(pool.Place(big, {{"a", 0}, {"a", 1}}).ok());
  ASSERT_TRUE(pool.s().Submit(Whole("small", 1, 1000), 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  EXPECT_EQ(pool.s().leases().at(pool.LeaseOf("small")).gpus[0].node, "b");
}

INSTANTIATE_TEST_SUITE_P(Policies, SchedulerPlacement, ::testing::Values("gpupool", "packing", "best-fit"));

TEST(SchedulerPolicy, UnknownPolicyNamesAreRefusedWithTheList) {
  absl::Status s = ValidPlacementPolicy("tetris");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("packing"), std::string::npos) << s;
  EXPECT_NE(s.message().find("gpupool"), std::string::npos) << s;
  EXPECT_TRUE(ValidPlacementPolicy("gpupool").ok());
  EXPECT_TRUE(ValidPlacementPolicy("packing").ok());
}

// A preferred node (the driver's: tasks run there without a worker) wins the ties its state
// would win, whichever node comes first otherwise; it never wins where its state is worse.
TEST(SchedulerPolicy, APreferredNodeWinsTiesButNeverAWorsePlacement) {
  Pool pool(kHostNodes, {.placement_policy = "gpupool"});
  for (const char* preferred : {"b", "a", "b"}) {
    LeaseRequest r = Whole(std::string("on-") + preferred, 4);
    r.preferred_nodes = {"nowhere", preferred};  // an unknown name is no reason to fail
    ASSERT_TRUE(pool.s().Submit(r, 0).ok());
    ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
    EXPECT_EQ(pool.s().leases().at(pool.LeaseOf(r.id)).gpus[0].node, preferred);
    ASSERT_TRUE(pool.s().Release(pool.LeaseOf(r.id), 0).ok());
  }
  // Node a holds a half-used GPU: a half-GPU request belongs there (it fills the GPU), and
  // preferring node b does not send it to an empty GPU.
  LeaseRequest half;
  half.id = "half";
  half.team = "t";
  half.slot = SlotShape::Fraction(10240, 500);
  half.preferred_nodes = {"a"};
  ASSERT_TRUE(pool.s().Submit(half, 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  LeaseRequest other = half;
  other.id = "other";
  other.preferred_nodes = {"b"};
  ASSERT_TRUE(pool.s().Submit(other, 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  EXPECT_EQ(pool.s().leases().at(pool.LeaseOf("other")).gpus[0].node, "a");
}

// One node whose GPU 0 holds 0.7 of its compute: the learned workload is 0.3 and 0.7 sharing
// tasks, so a 0.3 task belongs beside the 0.7 one (FGD's complementary share), not on an empty GPU
// where it would leave 0.7 that only a 0.7 task could use. (Packing does the same by tightness, so
// this pins the outcome, not the path; the next test is one where the two decide differently.)
TEST(SchedulerPolicy, TheDefaultPolicyFillsTheComplementaryShare) {
  Pool pool(R"(
nodes:
  - name: n
    gpus: [{model: H100-80GB, count: 2}]
)");
  LeaseRequest big;
  big.id = "big";
  big.team = "t";
  big.slot = SlotShape::Fraction(40960, 700);
  ASSERT_TRUE(pool.s().Submit(big, 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  const int big_gpu = pool.s().leases().begin()->second.gpus[0].index;
  LeaseRequest small = big;
  small.id = "small";
  small.slot = SlotShape::Fraction(10240, 300);
  ASSERT_TRUE(pool.s().Submit(small, 0).ok());
  ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
  for (const auto& [id, lease] : pool.s().leases()) {
    EXPECT_EQ(lease.gpus[0].index, big_gpu) << id;
  }
}

// The policy path answers in the live scheduler, and decides otherwise than packing would: having
// seen one-GPU tasks that need 11 cores each, gpupool keeps CPU-only work off the node whose CPU
// its GPUs need (24 cores for 2 GPUs), while packing takes the node with the least free compute.
TEST(SchedulerPolicy, LearnedShapesKeepCpuWorkOffTheNodeWhoseGpusNeedIt) {
  constexpr char kNodes[] = R"(
nodes:
  - name: a-dense
    cpus: 24
    gpus: [{model: H100-80GB, count: 2}]
  - name: b-cpu-rich
    cpus: 200
    gpus: [{model: H100-80GB, count: 8}]
)";
  for (const std::string policy : {"gpupool", "packing"}) {
    Pool pool(kNodes, {.placement_policy = policy});
    // The workload so far: one-GPU tasks of 11 cores (submitted and withdrawn: what is learned is
    // what was asked for, placed or not).
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(pool.s().Submit(Whole("seen-" + std::to_string(i), 1, 11000), 0).ok());
      ASSERT_TRUE(pool.s().Cancel("seen-" + std::to_string(i)).ok());
    }
    ASSERT_TRUE(pool.s().Submit(HostOnly("cpu", 20000, 0), 0).ok());
    ASSERT_EQ(pool.s().Schedule(0).granted.size(), 1u);
    EXPECT_EQ(pool.s().leases().begin()->second.gpus[0].node, policy == "gpupool" ? "b-cpu-rich" : "a-dense")
        << policy;
  }
}

// Models the catalogue does not know (a trace's opaque labels) are named by the device's name.
TEST(SchedulerPolicy, ModelsOutsideTheCatalogueAreNamedByTheirDeviceName) {
  std::vector<DiscoveredNode> nodes(2);
  nodes[0].name = "x";
  nodes[1].name = "y";
  for (int n = 0; n < 2; ++n) {
    DiscoveredGpu g;
    g.name = n == 0 ? "G2" : "T4";
    g.memory_mib = 16384;
    nodes[n].gpus.push_back(g);
  }
  Inventory inventory = Inventory::FromDiscovery(nodes).value();
  SchedulingConfig config = DefaultSchedulingConfig();
  Scheduler s(inventory, config);
  LeaseRequest r;
  r.id = "g2";
  r.team = "t";
  r.allowed_models = {"G2"};
  ASSERT_TRUE(s.Submit(r, 0).ok());
  ASSERT_EQ(s.Schedule(0).granted.size(), 1u);
  EXPECT_EQ(s.leases().begin()->second.gpus[0].node, "x");
  r.id = "g9";
  r.allowed_models = {"G9"};
  EXPECT_EQ(s.Submit(r, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::pool
