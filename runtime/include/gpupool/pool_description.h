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
//
// A GpuInfo is the one description of a GPU on every surface: `gpupool devices --json`,
// `gpupool.describe_pool()` in Python and the Cap'n Proto inventory carry the same fields.
// ForEachField below is the list of those fields with the names and values both JSON and Python
// give them, so a field added to a record and to its ForEachField appears in both.
#ifndef GPUPOOL_POOL_DESCRIPTION_H_
#define GPUPOOL_POOL_DESCRIPTION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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

enum class MigMode { kUnsupported, kDisabled, kEnabled };
// Ordered from best to worst.
enum class HealthState {
  kHealthy,   // schedulable
  kDegraded,  // schedulable, placement prefers other GPUs
  kDraining,  // no new leases; running leases are revoked with their grace period
  kQuarantined,  // drained and empty: no leases; diagnosed until it passes or fails
  kFailed,       // failed its diagnostics: out of service until an operator says it was repaired
  kLost,         // gone: leases on it are lost
};

// The names every surface prints: "unsupported" | "disabled" | "enabled", and
// "healthy" | "degraded" | "draining" | "quarantined" | "failed" | "lost". Parse* is their inverse (nullopt for any other
// string).
GPUPOOL_API std::string_view MigModeName(MigMode mode);
GPUPOOL_API std::string_view HealthStateName(HealthState state);
GPUPOOL_API std::optional<MigMode> ParseMigMode(std::string_view name);
GPUPOOL_API std::optional<HealthState> ParseHealthState(std::string_view name);

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
  MigMode mig_mode = MigMode::kUnsupported;
  std::vector<MigInstance> instances;
  std::string nvlink_island;  // pool-wide id: "node-0/nvl0"
  std::string pci_bus_id;
  int numa_node = -1;
  HealthState health = HealthState::kHealthy;
  std::vector<std::string> health_reasons;
  int temperature_c = -1;   // -1 when unknown
  double price_per_hour = 0;  // USD, catalogue default or configured
  std::map<std::string, std::string> labels;

  // "9.0": how every surface shows compute_capability_major and _minor.
  std::string compute_capability() const {
    return std::to_string(compute_capability_major) + "." +
           std::to_string(compute_capability_minor);
  }
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

// Calls visit(name, value) for every field of a record, in order, under the name and with the
// value that `gpupool devices --json` and Python's describe_pool() give it: enums as their names,
// the compute capability as "9.0". A value is an int, uint64_t, double, std::string,
// std::vector<std::string>, std::map<std::string, std::string>, or a std::vector of records
// (ComputeInstance, MigInstance, GpuInfo, NodeInfo) that the visitor presents with ForEachField
// in turn.
// A PoolDescription's `notice` is not a field: it is a message for a person (the CLI prints it on
// stderr), not part of the pool.
//
//   gpupool::ForEachField(gpu, [](const char* name, const auto& value) {
//     if constexpr (std::is_arithmetic_v<std::decay_t<decltype(value)>>)
//       std::cout << name << "=" << value << "\n";
//   });
template <typename Visit>
void ForEachField(const ComputeInstance& ci, Visit&& visit) {
  visit("id", ci.id);
  visit("profile", ci.profile);
}

template <typename Visit>
void ForEachField(const MigInstance& mi, Visit&& visit) {
  visit("id", mi.id);
  visit("profile", mi.profile);
  visit("start", mi.start);
  visit("size", mi.size);
  visit("uuid", mi.uuid);
  visit("compute_instances", mi.compute_instances);
}

template <typename Visit>
void ForEachField(const GpuInfo& g, Visit&& visit) {
  visit("index", g.index);
  visit("model", g.model);
  visit("name", g.name);
  visit("uuid", g.uuid);
  visit("memory_mib", g.memory_mib);
  visit("compute_capability", g.compute_capability());
  visit("sm_count", g.sm_count);
  visit("mig_mode", std::string(MigModeName(g.mig_mode)));
  visit("instances", g.instances);
  visit("nvlink_island", g.nvlink_island);
  visit("pci_bus_id", g.pci_bus_id);
  visit("numa_node", g.numa_node);
  visit("health", std::string(HealthStateName(g.health)));
  visit("health_reasons", g.health_reasons);
  visit("temperature_c", g.temperature_c);
  visit("price_per_hour", g.price_per_hour);
  visit("labels", g.labels);
}

template <typename Visit>
void ForEachField(const NodeInfo& node, Visit&& visit) {
  visit("name", node.name);
  visit("labels", node.labels);
  visit("gpus", node.gpus);
}

template <typename Visit>
void ForEachField(const PoolDescription& pool, Visit&& visit) {
  visit("driver", pool.driver);
  visit("nodes", pool.nodes);
}

// Whether ForEachField lists T's fields: true for the records above, which a converter presents
// field by field.
template <typename T>
inline constexpr bool kHasFields =
    requires(const T& record) { ForEachField(record, [](const char*, const auto&) {}); };

// Whether T is a list of such records (a GPU's instances, a node's GPUs): a converter presents
// each element as a record.
template <typename T>
inline constexpr bool kIsRecordList = false;
template <typename T>
inline constexpr bool kIsRecordList<std::vector<T>> = kHasFields<T>;

// Discovers the pool and reads each GPU's health once.
GPUPOOL_API PoolDescription DescribePool(const PoolOptions& options = {});

}  // namespace gpupool

#endif  // GPUPOOL_POOL_DESCRIPTION_H_
