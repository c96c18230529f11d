#include "pool/scheduler/policy_view.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_join.h"

namespace gpupool::pool {
placement::PodRequest PodRequestOf(const LeaseRequest& r, const placement::ModelIndex& models) {
  placement::PodRequest pod = PodShapeOf(r);
  if (!r.allowed_models.empty()) {
    // By the pool's own model names: the catalogue's spelling, whatever case was asked.
    std::vector<std::string> names;
    for (const std::string& m : r.allowed_models) {
      const GpuModel* known = FindGpuModel(m);
      names.push_back(known != nullptr ? known->name : m);
    }
    pod.models = models.ResolveSpec(absl::StrJoin(names, "|"));
  }
  return pod;
}

placement::PodRequest PodShapeOf(const LeaseRequest& r) {
  placement::PodRequest pod;
  // A host-only slot is a policy's CPU-only request; its lease still names a GPU of the node.
  pod.num_gpu = r.slot.host_only() ? 0 : r.slot_count;
  pod.gpu_milli = r.slot.host_only() ? 0 : SlotComputeMilli(r.slot);
  pod.cpu_milli = r.slot.cpu_milli * r.slot_count;
  pod.memory_mib = r.slot.host_memory_mib * r.slot_count;
  return pod;
}

PolicyView::PolicyView(const PoolTopology& topology, const std::vector<int>& candidates,
                       const CapacityState& state, const placement::ModelIndex& models)
    : topology_(&topology),
      view_node_(topology.nodes().size(), -1),
      seen_gang_(topology.gpus().size(), 0) {
  std::vector<placement::NodeCapacity> nodes;
  for (int g : candidates) {
    const GpuStatic& gpu = topology.gpus()[g];
    int& v = view_node_[gpu.node];
    if (v < 0) {
      v = static_cast<int>(node_gpus_.size());
      node_gpus_.emplace_back();
      view_of_name_[gpu.ref.node] = v;
      const int64_t cpu = topology.node_cpu_milli(gpu.node);
      const int64_t memory = topology.node_memory_mib(gpu.node);
      // A node's GPUs share one model label here; the first candidate's names it (nodes with
      // mixed models are rare, and the scheduler's own filter still checks every GPU).
      nodes.push_back({.name = gpu.ref.node, .model = gpu.model_name,
                       .cpu_milli = cpu > 0 ? cpu : placement::kUncountedCapacity,
                       .memory_mib = memory > 0 ? memory : placement::kUncountedCapacity, .num_gpu = 0});
    }
    node_gpus_[v].push_back(g);
    ++nodes[v].num_gpu;
  }
  absl::StatusOr<placement::ClusterState> cluster = placement::ClusterState::Create(nodes, models);
  // Node names are unique in a topology; only a pool of more models than a ModelSet holds can be
  // refused, and then this view answers nothing (the scan places everything).
  if (!cluster.ok()) return;
  cluster_.emplace(*std::move(cluster));
  state_of_.assign(node_gpus_.size(), std::string());
  for (size_t n = 0; n < view_node_.size(); ++n) RefreshNode(state, static_cast<int>(n));
}

void PolicyView::RefreshNode(const CapacityState& state, int node) {
  const int v = view_node_[node];
  if (v < 0 || !cluster_) return;
  scratch_.clear();
  for (int g : node_gpus_[v]) {
    const GpuState& s = state[g];
    scratch_.push_back(static_cast<int16_t>(PlainGpu(s) ? s.compute_free_milli : 0));
    const char gang = s.gang_reserved_for != 0;
    gang_reserved_ += gang - seen_gang_[g];
    seen_gang_[g] = gang;
  }
  const int64_t cpu = state.cpu_counted(node) ? state.cpu_free(node) : placement::kUncountedCapacity;
  const int64_t memory = state.host_memory_counted(node) ? state.host_memory_free(node) : placement::kUncountedCapacity;
  cluster_->SetFree(v, cpu, memory, scratch_);
  // Its state's key: everything a node-state policy reads of it but its name.
  const placement::NodeView node_view = cluster_->view().node(v);
  std::sort(scratch_.begin(), scratch_.end());
  std::string key;
  key.reserve(48 + 2 * scratch_.size());
  for (int64_t x : {static_cast<int64_t>(node_view.model_id), node_view.cpu_milli_free,
                    node_view.cpu_milli_total, node_view.memory_mib_free, node_view.memory_mib_total}) {
    key.append(reinterpret_cast<const char*>(&x), sizeof(x));
  }
  key.append(reinterpret_cast<const char*>(scratch_.data()), scratch_.size() * sizeof(int16_t));
  if (key == state_of_[v]) return;
  const std::pair<int, int> entry{cluster_->view().tie_rank(v), v};
  if (!state_of_[v].empty()) {
    auto it = by_state_.find(state_of_[v]);
    it->second.erase(entry);
    if (it->second.empty()) by_state_.erase(it);
  }
  by_state_[key].insert(entry);
  state_of_[v] = std::move(key);
}

bool PolicyView::Answers(const LeaseRequest& r, const PlacementOptions& options) const {
  if (!cluster_ || options.first_fit || options.ignore_health || options.ignore_reservations ||
      options.ignore_host || options.avoid_spare) {
    return false;
  }
  if (r.slot.kind == SlotKind::kFraction) {
    if (r.slot_count != 1) return false;  // a policy's multi-GPU request takes whole GPUs
  } else if (r.slot.kind != SlotKind::kWholeGpu) {
    return false;
  }
  // One node: the policy's unit. A same-island gang may span nodes where islands do.
  if (r.slot_count > 1 && r.topology != GangTopology::kSameNode) return false;
  if (gang_reserved_ > 0 && (options.ignore_gang_reservations || r.runtime_estimate_s.has_value())) return false;
  return true;
}

PolicyAnswer PolicyView::Place(placement::PlacementPolicy& policy, const CapacityState& state,
                               const LeaseRequest& r, const PlacementOptions& options) const {
  if (!Answers(r, options)) return {};
  placement::Decision d;
  int node = -1;
  // The candidates already satisfy the request's model constraint (checked by the scheduler's
  // own filter): the policy is given the shape alone.
  const placement::PodRequest pod = PodShapeOf(r);
  if (policy.ScoresByNodeState()) {
    // The request's preferred nodes (soft affinity) stand for their states: the policy scores a
    // state, so the preferred node wins the choice among nodes in its state, and is never chosen
    // over a better state. Between different states that score alike, the policy's tie order
    // (by node) still decides, now with the preferred node's rank.
    preferred_.clear();
    for (const std::string& name : r.preferred_nodes) {
      auto v = view_of_name_.find(name);
      if (v == view_of_name_.end()) continue;
      auto group = by_state_.find(state_of_[v->second]);
      if (group != by_state_.end()) preferred_.emplace_back(&*group, v->second);
    }
    representatives_.clear();
    for (const auto& entry : by_state_) {
      int representative = entry.second.begin()->second;
      for (const auto& [group, v] : preferred_) {
        if (group == &entry) {
          representative = v;
          break;
        }
      }
      representatives_.push_back(representative);
    }
    d = policy.Decide(placement::ClusterView(*cluster_, representatives_), pod);
    if (d.placed()) node = representatives_[d.node];
  } else {
    d = policy.Decide(cluster_->view(), pod);
    node = d.node;
  }
  if (!d.placed()) return {.answered = true, .gpus = std::nullopt};
  std::vector<int> gpus;
  for (int i : d.gpus) gpus.push_back(node_gpus_[node][i]);
  if (r.slot.host_only()) {
    for (int g : node_gpus_[node]) {
      if (static_cast<int>(gpus.size()) == r.slot_count) break;
      if (SlotUsable(state, g, r, options)) gpus.push_back(g);
    }
    if (static_cast<int>(gpus.size()) != r.slot_count) return {};
  }
  // The mirror does not see a fraction's GPU memory: a choice that fails the filter goes to the
  // scan, which does.
  for (int g : gpus) {
    if (!SlotUsable(state, g, r, options)) return {};
  }
  if (!state.HostFits(topology_->gpus()[gpus.front()].node, r.slot, r.slot_count)) return {};
  return {.answered = true, .gpus = std::move(gpus)};
}

}  // namespace gpupool::pool
