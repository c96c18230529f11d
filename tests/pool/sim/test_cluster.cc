#include "tests/pool/sim/test_cluster.h"

#include <cassert>

#include "gtest/gtest.h"

namespace gpupool::pool::sim::testing {

placement::NodeCapacity Node(std::string name, int gpus, int64_t cpu_milli, std::string model,
                             int64_t memory_mib) {
  return placement::NodeCapacity{std::move(name), std::move(model), cpu_milli, memory_mib, gpus};
}

placement::PodRequest Share(int gpu_milli, int64_t cpu_milli, int64_t memory_mib) {
  placement::PodRequest r;
  r.cpu_milli = cpu_milli;
  r.memory_mib = memory_mib;
  r.num_gpu = 1;
  r.gpu_milli = gpu_milli;
  return r;
}

placement::PodRequest Whole(int num_gpu, int64_t cpu_milli, int64_t memory_mib) {
  placement::PodRequest r = Share(placement::kMilliPerGpu, cpu_milli, memory_mib);
  r.num_gpu = num_gpu;
  return r;
}

placement::PodRequest CpuOnly(int64_t cpu_milli, int64_t memory_mib) {
  placement::PodRequest r;
  r.cpu_milli = cpu_milli;
  r.memory_mib = memory_mib;
  return r;
}

placement::ClusterState MakeCluster(std::vector<placement::NodeCapacity> nodes) {
  auto state = placement::ClusterState::Create(nodes);
  EXPECT_TRUE(state.ok()) << state.status();
  return *std::move(state);
}

int IndexOf(const placement::ClusterState& state, const std::string& name) {
  for (int i = 0; i < state.size(); ++i) {
    if (state.view().node(i).name == name) return i;
  }
  assert(false && "no such node");
  return -1;
}

std::string NameOf(const placement::ClusterState& state, int node) {
  if (node < 0) return "<unschedulable>";
  return std::string(state.view().node(node).name);
}

void Use(placement::ClusterState& state, const std::string& name,
         const placement::PodRequest& request, std::vector<int> gpus) {
  state.Apply(IndexOf(state, name), request, gpus);
}

}  // namespace gpupool::pool::sim::testing
