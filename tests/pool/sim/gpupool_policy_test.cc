// gpupool's default policy: it beats best-fit where fragmentation decides, fills complementary
// GPU shares, and keeps CPU on GPU-dense nodes for the GPU tasks that need it.
#include <optional>

#include "gtest/gtest.h"
#include "pool/placement/policy_registry.h"
#include "pool/sim/protocol.h"
#include "pool/placement/random_stream.h"
#include "pool/sim/allocation_curve.h"
#include "pool/sim/trace.h"
#include "pool/sim/workload.h"
#include "tests/pool/sim/test_cluster.h"

namespace gpupool::pool::sim::testing {
namespace {

PodSpec Pod(int num_gpu, int gpu_milli, int64_t cpu_milli, int64_t memory_mib = 8192) {
  PodSpec p;
  p.name = "p";
  p.num_gpu = num_gpu;
  p.gpu_milli = num_gpu > 0 ? gpu_milli : 0;
  p.cpu_milli = cpu_milli;
  p.memory_mib = memory_mib;
  return p;
}

// A small cluster and workload shaped like the openb trace: GPU-dense nodes with about 12 cores
// per GPU, CPU-rich 2-GPU nodes and CPU-poor 2-GPU nodes; sharing tasks whose shares pair up to a
// whole GPU (470+470, 650+320) or strand the rest (810), whole-GPU tasks that need 11 cores each,
// and CPU-only tasks that compete with them for CPU.
std::vector<PodSpec> FragmentingWorkload() {
  std::vector<PodSpec> pods;
  auto add = [&](int n, const PodSpec& p) { pods.insert(pods.end(), n, p); };
  add(10, Pod(1, 810, 3000, 5120));
  add(14, Pod(1, 1000, 11000, 49152));
  add(5, Pod(1, 1000, 3000, 5120));
  add(4, Pod(1, 470, 11000, 47104));
  add(4, Pod(1, 470, 8000, 29696));
  add(3, Pod(1, 650, 11000, 47104));
  add(2, Pod(1, 320, 4000, 22528));
  add(1, Pod(1, 230, 4000, 22528));
  add(1, Pod(1, 160, 4000, 14336));
  add(4, Pod(0, 0, 12000, 57344));
  add(3, Pod(0, 0, 32000, 49152));
  for (size_t i = 0; i < pods.size(); ++i) pods[i].name = "pod-" + std::to_string(i);
  return pods;
}

std::vector<placement::NodeCapacity> MixedCluster() {
  std::vector<placement::NodeCapacity> nodes;
  for (int i = 0; i < 12; ++i) nodes.push_back(Node("g-" + std::to_string(i), 8, 96000, "G2", 393216));
  for (int i = 0; i < 12; ++i) nodes.push_back(Node("t-" + std::to_string(i), 2, 104000, "T4", 524288));
  for (int i = 0; i < 6; ++i) nodes.push_back(Node("p-" + std::to_string(i), 2, 16000, "P100", 122880));
  return nodes;
}

double MeanAt100(const std::string& policy) {
  ProtocolOptions options;
  options.policy = policy;
  options.seeds = {1, 2, 3, 4, 5, 6, 7, 8};
  options.tune = 1.3;
  const auto nodes = MixedCluster();
  const auto pods = FragmentingWorkload();
  absl::StatusOr<ProtocolResult> r = RunProtocol(nodes, pods, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() && r->mean_allocated_pct[100] ? *r->mean_allocated_pct[100] : 0;
}

TEST(GpupoolPolicy, AllocatesMoreThanBestFitWhenFragmentationDecides) {
  const double gpupool = MeanAt100("default");
  const double best_fit = MeanAt100("best-fit");
  EXPECT_GT(gpupool, best_fit + 1.0) << "gpupool " << gpupool << " best-fit " << best_fit;
}

std::unique_ptr<placement::PlacementPolicy> Gpupool(const placement::ClusterState& state,
                                                    const std::vector<PodSpec>& workload) {
  auto policy = placement::MakePolicy("default", {});
  EXPECT_TRUE(policy.ok());
  // The policy learns the workload from the requests it is told of, as the head's does.
  for (const PodSpec& p : workload) (*policy)->Observe(ToRequest(p, state.models()));
  return *std::move(policy);
}

TEST(GpupoolPolicy, FillsTheComplementaryShare) {
  auto state = std::make_optional(MakeCluster({Node("a", 2), Node("b", 2)}));
  Use(*state, "b", Share(700), {1});
  auto policy = Gpupool(*state, {Pod(1, 700, 1000), Pod(1, 300, 1000), Pod(1, 1000, 1000)});
  const placement::Decision d = policy->Decide(state->view(), Share(300));
  EXPECT_EQ(NameOf(*state, d.node), "b");
  EXPECT_EQ(d.gpus, placement::GpuIndices{1});
}

TEST(GpupoolPolicy, PutsCpuOnlyTasksWhereCpuIsNotNeededByGpus) {
  // "a-dense" comes first by name, so only the measure can send the CPU task elsewhere: on the
  // dense node 40 cores would leave too little CPU for its 8 GPUs' 11-core tasks.
  auto state = std::make_optional(MakeCluster({Node("a-dense", 8, 96000), Node("b-cpu-rich", 2, 104000)}));
  auto policy = Gpupool(*state, {Pod(1, 1000, 11000), Pod(0, 0, 40000)});
  const placement::Decision d = policy->Decide(state->view(), CpuOnly(40000));
  EXPECT_EQ(NameOf(*state, d.node), "b-cpu-rich");
}

// The protocol replays through the pool scheduler (trace_pool.h); what it places must be what the
// policy alone, told of each arrival and deciding on a plain ClusterState, places: the scheduler's
// filter, its node-state pre-filter and its mirror of the capacity change nothing.
std::vector<std::optional<double>> CurveOfThePolicyAlone(const std::string& name, uint64_t seed) {
  const auto nodes = MixedCluster();
  const auto pods = FragmentingWorkload();
  placement::ClusterState state = MakeCluster(nodes);
  placement::RandomStream random(seed);
  const ProtocolWorkload workload = BuildProtocolWorkload(pods, state.total_gpu_milli(), 1.3, random);
  placement::PolicyContext context;
  context.models = &state.models();
  for (const PodSpec& p : pods) context.workload.push_back(ToShapeSample(p));
  auto policy = placement::MakePolicy(name, context);
  EXPECT_TRUE(policy.ok());
  AllocationCurve curve(state.total_gpu_milli() / placement::kMilliPerGpu, 130);
  int64_t arrived = 0, allocated = 0;
  for (int i : workload.arrivals) {
    const placement::PodRequest request = ToRequest(pods[i], state.models());
    (*policy)->Observe(request);
    const placement::Decision d = (*policy)->Decide(state.view(), request);
    if (d.placed()) {
      state.Apply(d.node, request, d.gpus);
      allocated += request.gpu_demand_milli();
    }
    arrived += request.gpu_demand_milli();
    curve.Record(arrived, allocated);
  }
  return curve.Figures();
}

TEST(GpupoolPolicy, TheSchedulerPlacesWhatThePolicyAloneWould) {
  for (const char* name : {"gpupool", "fgd", "best-fit"}) {
    for (uint64_t seed : {3, 4}) {
      ProtocolOptions options;
      options.policy = name;
      options.seeds = {seed};
      const auto nodes = MixedCluster();
      const auto pods = FragmentingWorkload();
      absl::StatusOr<SeedResult> through_scheduler = RunProtocolSeed(nodes, pods, options, seed);
      ASSERT_TRUE(through_scheduler.ok()) << through_scheduler.status();
      EXPECT_EQ(through_scheduler->allocated_pct, CurveOfThePolicyAlone(name, seed)) << name << " seed " << seed;
    }
  }
}

TEST(GpupoolPolicy, IsDeterministic) {
  ProtocolOptions options;
  options.policy = "gpupool";
  options.seeds = {3};
  const auto nodes = MixedCluster();
  const auto pods = FragmentingWorkload();
  auto a = RunProtocol(nodes, pods, options);
  auto b = RunProtocol(nodes, pods, options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->mean_allocated_pct, b->mean_allocated_pct);
}

}  // namespace
}  // namespace gpupool::pool::sim::testing
