// File: pool/sim/trace_reader.h
//
// Reads the openb node and pod lists (traces/openb/README.md). Columns are found by name:
//   nodes: sn, cpu_milli, memory_mib, gpu, model
//   pods:  name, cpu_milli, memory_mib, num_gpu, gpu_milli [, gpu_spec, creation_time,
//          deletion_time, scheduled_time]   (others, such as qos and pod_phase, are ignored)
// A malformed line fails the whole read with "FILE:LINE:COLUMN: what is wrong".
//
//   absl::StatusOr<std::vector<NodeCapacity>> nodes = ReadNodeList("openb_node_list_gpu_node.csv");
//   absl::StatusOr<std::vector<PodSpec>> pods = ReadPodList("openb_pod_list_default.csv");
#ifndef GPUPOOL_POOL_SIM_TRACE_READER_H_
#define GPUPOOL_POOL_SIM_TRACE_READER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/sim/trace.h"

namespace gpupool::pool::sim {

// Limits that catch corrupt numbers early; real nodes are far below them.
inline constexpr int64_t kMaxGpusPerNode = 64;
inline constexpr int64_t kMaxCpuMilli = int64_t{1} << 40;
inline constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;

absl::StatusOr<std::vector<NodeCapacity>> ReadNodeList(const std::string& path);
absl::StatusOr<std::vector<PodSpec>> ReadPodList(const std::string& path);

// The same, from text; `source` names it in messages.
absl::StatusOr<std::vector<NodeCapacity>> ParseNodeList(std::string_view text, std::string source);
absl::StatusOr<std::vector<PodSpec>> ParsePodList(std::string_view text, std::string source);

}  // namespace gpupool::pool::sim

#endif  // GPUPOOL_POOL_SIM_TRACE_READER_H_
