// Small hand-made clusters and requests for the placement and simulator tests.
#ifndef GPUPOOL_TESTS_POOL_SIM_TEST_CLUSTER_H_
#define GPUPOOL_TESTS_POOL_SIM_TEST_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pool/placement/cluster_state.h"
#include "pool/placement/pod_request.h"

namespace gpupool::pool::sim::testing {

placement::NodeCapacity Node(std::string name, int gpus, int64_t cpu_milli = 64000,
                             std::string model = "G2", int64_t memory_mib = 262144);

placement::PodRequest Share(int gpu_milli, int64_t cpu_milli = 1000, int64_t memory_mib = 1024);
placement::PodRequest Whole(int num_gpu, int64_t cpu_milli = 1000, int64_t memory_mib = 1024);
placement::PodRequest CpuOnly(int64_t cpu_milli, int64_t memory_mib = 1024);

// A cluster with all capacity free (the test fails if the nodes are invalid).
placement::ClusterState MakeCluster(std::vector<placement::NodeCapacity> nodes);

// A state whose node `name` has had `request` applied on GPUs `gpus`.
void Use(placement::ClusterState& state, const std::string& name,
         const placement::PodRequest& request, std::vector<int> gpus);

int IndexOf(const placement::ClusterState& state, const std::string& name);
std::string NameOf(const placement::ClusterState& state, int node);

}  // namespace gpupool::pool::sim::testing

#endif  // GPUPOOL_TESTS_POOL_SIM_TEST_CLUSTER_H_
