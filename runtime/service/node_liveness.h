// File: runtime/service/node_liveness.h
//
// The health the pool service applies to each GPU, and where it comes from. A pool of this
// machine's GPUs reads them through the driver; a pool of remote nodes (mpirun's rank 0, `gpupool
// head`) hears of them from the nodes' agents: a node is down (its GPUs lost) until its agent
// reports it up, and while it is up each GPU has the health its agent last reported.
//
// This class decides; the service applies what it decides to the scheduler:
//
//   absl::StatusOr<std::vector<NodeLiveness::Change>> changes = liveness.SetUp("node-1", true);
//   for (const auto& c : *changes) ApplyToScheduler(c.gpu, c.state);
//
// Not thread-safe: the service's lock guards it.
#ifndef GPUPOOL_RUNTIME_SERVICE_NODE_LIVENESS_H_
#define GPUPOOL_RUNTIME_SERVICE_NODE_LIVENESS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/health.h"
#include "pool/inventory.h"

namespace gpupool::runtime {

class NodeLiveness {
 public:
  // A GPU whose applied health changes.
  struct Change {
    pool::GpuRef gpu;
    pool::HealthState state;
  };

  // Over `inventory` (which must outlive this). For remote nodes every node starts down: its GPUs
  // are reported healthy and, until their agent is up, lost (see InitialChanges).
  NodeLiveness(const pool::Inventory& inventory, bool remote);

  // What the service applies once at start: for remote nodes, every GPU lost.
  std::vector<Change> InitialChanges() const;
  // Records `state` as applied to `gpu`; false when it already was (nothing to do).
  bool Apply(const pool::GpuRef& gpu, pool::HealthState state);
  // The health applied now: lost while a remote node's agent is away.
  pool::HealthState Applied(const pool::GpuRef& gpu) const;
  // This machine's GPU: the state a driver reading means, judged against the state applied.
  pool::HealthState Assess(const pool::InventoryGpu& gpu, const pool::GpuHealthReading& reading) const;

  // Remote nodes. NotFound for a node (or GPU) the pool does not have.
  // Up: its GPUs take their reports; down: they are lost.
  absl::StatusOr<std::vector<Change>> SetUp(const std::string& node, bool up);
  // An agent's verdict for one GPU: applied at once while its node is up (one change), kept for
  // when it comes up otherwise (none).
  absl::StatusOr<std::vector<Change>> Report(const pool::GpuRef& gpu, pool::HealthState state);
  // Whether the node is up: a remote node while its agent is, this machine's while it has GPUs.
  bool up(const std::string& node) const;

 private:
  static std::string Key(const pool::GpuRef& gpu);

  const pool::Inventory& inventory_;
  const bool remote_;
  std::map<std::string, pool::HealthState> applied_;   // "node/index"
  std::map<std::string, bool> up_;                     // remote nodes: agent up
  std::map<std::string, pool::HealthState> reported_;  // remote GPUs: "node/index"
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_NODE_LIVENESS_H_
