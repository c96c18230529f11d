// File: pool/scheduler/lease_request.h
//
// What a job asks the pool for: `slot_count` slots of one shape, on GPUs that satisfy its
// constraints, placed together by a gang topology, charged to a team at a priority class.
// Validation happens at submission: a request that is malformed, or that can never fit anywhere
// (no GPU matches its constraints, more slots than any node or island holds, beyond what its
// team's quota could ever allow), is refused with the reason and never queued.
//
//   LeaseRequest r;
//   r.id = "job-7/train";
//   r.team = "vision";
//   r.priority_class = "training";
//   r.slot_count = 8;
//   r.topology = GangTopology::kSameNvLinkIsland;
//   r.allowed_models = {"H100-80GB", "H200-141GB"};
#ifndef GPUPOOL_POOL_SCHEDULER_LEASE_REQUEST_H_
#define GPUPOOL_POOL_SCHEDULER_LEASE_REQUEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "pool/slot.h"

namespace gpupool::pool {

// How the slots of one request are placed relative to each other. All-or-nothing in every case.
enum class GangTopology { kAny, kSameNode, kSameNvLinkIsland };
absl::string_view GangTopologyName(GangTopology t);  // "any", "same-node", "same-nvlink-island"

inline constexpr int kMaxSlotsPerRequest = 4096;

struct LeaseRequest {
  std::string id;                  // unique among live requests; chosen by the submitter
  std::string team;
  std::string project;             // free-form, for accounting
  std::string workload_class;      // free-form ("training", "inference", "notebook"), accounting
  std::string priority_class;      // a configured class; empty = "training"

  int slot_count = 1;
  SlotShape slot = SlotShape::WholeGpu();

  std::vector<std::string> allowed_models;               // catalogue names; empty = any
  std::map<std::string, std::string> required_labels;    // affinity: every one must match
  std::map<std::string, std::string> forbidden_labels;   // anti-affinity: none may match
  int64_t min_gpu_memory_mib = 0;
  bool nvlink_required = false;    // every slot on a GPU with NVLink
  GangTopology topology = GangTopology::kAny;
  bool hardware_isolation = false; // MIG or whole GPUs only: no MPS, no fractions

  std::optional<int64_t> runtime_estimate_s;  // lets backfill run it ahead of a reservation

  // Soft affinity: among equally good placements, these nodes first, in this order (a job's
  // driver names its own node, as Ray's hybrid policy prefers the local node). Never a reason to
  // wait or to place worse. Honoured where a node-state placement policy decides (single-node
  // requests under the default policy); the packing scan ignores it.
  std::vector<std::string> preferred_nodes;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_SCHEDULER_LEASE_REQUEST_H_
