// File: pool/devices/pool_spec.h
//
// The description of a simulated pool: nodes, their GPUs (catalogue models), labels, NVLink
// islands, and GPUs with MIG enabled and their initial layout. It comes from the short SPEC form
// of the command line or from the `nodes:` section of the YAML configuration (pool_config.h).
//
// SPEC lists the GPUs of one node as COUNTxMODEL[,COUNTxMODEL...], catalogue model names,
// case-insensitive; `node_count` repeats that node:
//   ParseSimulationSpec("4xH100-80GB,2xL4", 2)   -> node-0 and node-1, each 4 H100 + 2 L4
// GPUs of one model with NVLink on a node form one NVLink island (as in an HGX/DGX board);
// models without NVLink are each their own island.
#ifndef GPUPOOL_POOL_DEVICES_POOL_SPEC_H_
#define GPUPOOL_POOL_DEVICES_POOL_SPEC_H_

#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "pool/gpu_catalogue.h"

namespace gpupool::pool {

inline constexpr int kMaxGpusPerNode = 64;
inline constexpr int kMaxSimulatedNodes = 100000;

struct SimulatedGpuSpec {
  const GpuModel* model = nullptr;
  std::string nvlink_island;        // empty: the GPU is its own island
  bool mig_enabled = false;
  std::vector<std::string> mig_profiles;  // initial layout, placed by the MIG planner
  std::map<std::string, std::string> labels;
};

struct SimulatedNodeSpec {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<SimulatedGpuSpec> gpus;
  int64_t cpu_milli = 0;   // host CPU requests may use (0: not counted)
  int64_t memory_mib = 0;  // host memory requests may use (0: not counted)
};

struct SimulatedPoolSpec {
  std::vector<SimulatedNodeSpec> nodes;
};

// The default pool when a machine has no GPU: one node of 8 H100-80GB.
inline constexpr absl::string_view kDefaultSimulationSpec = "8xH100-80GB";

// Errors (InvalidArgument) quote the offending item and say what form is expected.
absl::StatusOr<SimulatedPoolSpec> ParseSimulationSpec(absl::string_view spec, int node_count = 1);

// Gives GPUs without an explicit island the default one (per node: one island per NVLink-capable
// model, "nvl0", "nvl1", ...).
void AssignDefaultNvLinkIslands(SimulatedNodeSpec& node);

// "2 nodes x (4 H100-80GB + 2 L4)" for the one-line notice on stderr.
std::string DescribePool(const SimulatedPoolSpec& spec);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_DEVICES_POOL_SPEC_H_
