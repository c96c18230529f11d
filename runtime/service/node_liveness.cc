#include "runtime/service/node_liveness.h"

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

NodeLiveness::NodeLiveness(const pool::Inventory& inventory, bool remote) : inventory_(inventory), remote_(remote) {
  if (!remote_) return;
  for (const pool::InventoryNode& node : inventory_.nodes()) up_[node.name] = false;
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) reported_[Key(gpu.ref)] = pool::HealthState::kHealthy;
}

std::string NodeLiveness::Key(const pool::GpuRef& gpu) { return absl::StrCat(gpu.node, "/", gpu.index); }

std::vector<NodeLiveness::Change> NodeLiveness::InitialChanges() const {
  std::vector<Change> out;
  if (!remote_) return out;
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) out.push_back({gpu.ref, pool::HealthState::kLost});
  return out;
}

bool NodeLiveness::Apply(const pool::GpuRef& gpu, pool::HealthState state) {
  auto [it, inserted] = applied_.try_emplace(Key(gpu), state);
  if (!inserted && it->second == state) return false;
  it->second = state;
  return true;
}

pool::HealthState NodeLiveness::Applied(const pool::GpuRef& gpu) const {
  auto it = applied_.find(Key(gpu));
  if (it != applied_.end()) return it->second;
  const pool::InventoryGpu* known = inventory_.Find(gpu);
  return known != nullptr ? known->health : pool::HealthState::kLost;
}

pool::HealthState NodeLiveness::Assess(const pool::InventoryGpu& gpu, const pool::GpuHealthReading& reading) const {
  auto known = applied_.find(Key(gpu.ref));
  pool::HealthState previous = known == applied_.end() ? gpu.health : known->second;
  return pool::AssessHealth(reading, previous).state;
}

absl::StatusOr<std::vector<NodeLiveness::Change>> NodeLiveness::SetUp(const std::string& node, bool up) {
  auto it = up_.find(node);
  if (it == up_.end()) return absl::NotFoundError(absl::StrCat("node '", node, "' is not in this pool"));
  it->second = up;
  std::vector<Change> out;
  for (const pool::InventoryGpu& gpu : inventory_.gpus()) {
    if (gpu.ref.node == node) out.push_back({gpu.ref, up ? reported_[Key(gpu.ref)] : pool::HealthState::kLost});
  }
  return out;
}

absl::StatusOr<std::vector<NodeLiveness::Change>> NodeLiveness::Report(const pool::GpuRef& gpu,
                                                                      pool::HealthState state) {
  auto reported = reported_.find(Key(gpu));
  if (reported == reported_.end()) {
    return absl::NotFoundError(absl::StrCat("GPU ", Key(gpu), " is not a remote GPU of this pool"));
  }
  reported->second = state;
  auto node = up_.find(gpu.node);
  if (node == up_.end() || !node->second) return std::vector<Change>{};
  return std::vector<Change>{{gpu, state}};
}

bool NodeLiveness::up(const std::string& node) const {
  if (!remote_) return inventory_.gpu_count() > 0;  // this machine's own nodes
  auto it = up_.find(node);
  return it != up_.end() && it->second;
}

}  // namespace gpupool::runtime
