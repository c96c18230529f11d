// File: gpupool/pool_description.h
//
// What the pool holds: every node, its GPUs, their MIG instances, NVLink islands and health. It
// is what `gpupool devices` prints, and what a program sees before it submits work.
//
//   #include <gpupool/gpupool.h>
//
//   gpupool::PoolOptions options;
//   options.simulate = "4xH100-80GB,2xL4";        // or leave empty: real GPUs when present
//   gpupool::PoolDescription pool = gpupool::DescribePool(options);
//   for (const gpupool::NodeInfo& node : pool.nodes)
//     for (const gpupool::GpuInfo& gpu : node.gpus)
//       std::cout << node.name << " " << gpu.index << " " << gpu.model << "\n";
//
// Errors throw gpupool::Error (see error.h) with a one-line message naming what was wrong.
#ifndef GPUPOOL_POOL_DESCRIPTION_H_
#define GPUPOOL_POOL_DESCRIPTION_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpupool/export.h"

namespace gpupool {

// How to find the pool's GPUs. Empty fields mean "decide for me": real GPUs when an NVIDIA
// driver and GPUs are present, else a simulated node of 8 H100-80GB (and `notice` says so).
struct PoolOptions {
  std::string driver;       // "", "nvidia" or "simulated"
  std::string simulate;     // COUNTxMODEL[,COUNTxMODEL...] for one node, e.g. "4xH100-80GB,2xL4"
  int node_count = 1;       // repeats the simulated node
  std::string config_path;  // YAML pool configuration (may list simulated nodes)
};

struct ComputeInstance {
  int id = 0;
  std::string profile;      // "1c.3g.40gb", or the GPU instance's profile when it spans it
};

struct MigInstance {
  int id = 0;
  std::string profile;      // "3g.40gb"
  int start = 0;            // first memory slice (0-7 on 8-slice GPUs)
  int size = 0;             // memory slices
  std::string uuid;         // "MIG-..." when known
  std::vector<ComputeInstance> compute_instances;
};

struct GpuInfo {
  int index = 0;
  std::string model;        // catalogue name ("H100-80GB"); the device's name when unknown
  std::string name;         // the device's own name ("NVIDIA H100 80GB HBM3")
  std::string uuid;
  uint64_t memory_mib = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  std::string mig_mode;     // "enabled" | "disabled" | "unsupported"
  std::vector<MigInstance> instances;
  std::string nvlink_island;  // pool-wide id: "node-0/nvl0"
  std::string pci_bus_id;
  int numa_node = -1;
  std::string health;       // "healthy" | "degraded" | "draining" | "lost"
  std::vector<std::string> health_reasons;
  int temperature_c = -1;   // -1 when unknown
  double price_per_hour = 0;  // USD, catalogue default or configured
  std::map<std::string, std::string> labels;
};

struct NodeInfo {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<GpuInfo> gpus;
};

struct PoolDescription {
  std::string driver;       // "nvidia" or "simulated"
  std::string notice;       // set when the driver was chosen automatically (fell back)
  std::vector<NodeInfo> nodes;
};

// Discovers the pool and reads each GPU's health once.
GPUPOOL_API PoolDescription DescribePool(const PoolOptions& options = {});

}  // namespace gpupool

#endif  // GPUPOOL_POOL_DESCRIPTION_H_
