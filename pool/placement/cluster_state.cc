#include "pool/placement/cluster_state.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpupool::pool::placement {

NodeView ClusterView::node(int view_index) const {
  const ClusterState& s = *state_;
  const int i = id(view_index);
  NodeView v;
  v.name = s.names_[i];
  v.model_id = s.model_id_[i];
  if (v.model_id >= 0) v.model = s.models_.label(v.model_id);
  v.cpu_milli_free = s.cpu_free_[i];
  v.cpu_milli_total = s.cpu_total_[i];
  v.memory_mib_free = s.memory_free_[i];
  v.memory_mib_total = s.memory_total_[i];
  v.gpu_milli_free = gpu_free(view_index);
  return v;
}

uint64_t ClusterState::NextGeneration() {
  // Global so that generations from different states (or copies of one) never collide in a cache.
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

absl::StatusOr<ClusterState> ClusterState::Create(std::span<const NodeCapacity> nodes) {
  return Create(nodes, ModelIndex());
}

absl::StatusOr<ClusterState> ClusterState::Create(std::span<const NodeCapacity> nodes,
                                                  const ModelIndex& models) {
  ClusterState s;
  s.models_ = models;
  absl::flat_hash_set<std::string_view> seen;
  s.gpu_begin_.push_back(0);
  for (const NodeCapacity& n : nodes) {
    if (!seen.insert(n.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate node name '", n.name, "'"));
    }
    if (n.cpu_milli < 0 || n.memory_mib < 0 || n.num_gpu < 0) {
      return absl::InvalidArgumentError(absl::StrCat("node '", n.name, "' has negative capacity"));
    }
    int model_id = -1;
    if (n.num_gpu > 0 || !n.model.empty()) {
      absl::StatusOr<int> id = s.models_.Intern(n.model);
      if (!id.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", n.name, "': ", id.status().message()));
      }
      model_id = *id;
    }
    s.names_.push_back(n.name);
    s.model_id_.push_back(model_id);
    s.cpu_total_.push_back(n.cpu_milli);
    s.memory_total_.push_back(n.memory_mib);
    s.cpu_free_.push_back(n.cpu_milli);
    s.memory_free_.push_back(n.memory_mib);
    s.gpu_free_.insert(s.gpu_free_.end(), n.num_gpu, static_cast<int16_t>(kMilliPerGpu));
    s.gpu_begin_.push_back(static_cast<int>(s.gpu_free_.size()));
    s.generation_.push_back(NextGeneration());
  }
  std::vector<int> by_name(s.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::sort(by_name.begin(), by_name.end(),
            [&](int a, int b) { return s.names_[a] < s.names_[b]; });
  s.tie_rank_.assign(s.size(), 0);
  for (int rank = 0; rank < s.size(); ++rank) s.tie_rank_[by_name[rank]] = rank;
  return s;
}

void ClusterState::Apply(int node, const PodRequest& request, std::span<const int> gpus) {
  assert(node >= 0 && node < size());
  assert(cpu_free_[node] >= request.cpu_milli && memory_free_[node] >= request.memory_mib);
  assert(static_cast<int>(gpus.size()) == request.num_gpu);
  cpu_free_[node] -= request.cpu_milli;
  memory_free_[node] -= request.memory_mib;
  for (int g : gpus) {
    assert(g >= 0 && g < gpu_begin_[node + 1] - gpu_begin_[node]);
    int16_t& free = gpu_free_[gpu_begin_[node] + g];
    assert(free >= request.gpu_milli);
    free = static_cast<int16_t>(free - request.gpu_milli);
  }
  generation_[node] = NextGeneration();
}

void ClusterState::Release(int node, const PodRequest& request, std::span<const int> gpus) {
  assert(node >= 0 && node < size());
  cpu_free_[node] += request.cpu_milli;
  memory_free_[node] += request.memory_mib;
  assert(cpu_free_[node] <= cpu_total_[node] && memory_free_[node] <= memory_total_[node]);
  for (int g : gpus) {
    int16_t& free = gpu_free_[gpu_begin_[node] + g];
    free = static_cast<int16_t>(free + request.gpu_milli);
    assert(free <= kMilliPerGpu);
  }
  generation_[node] = NextGeneration();
}

void ClusterState::SetFree(int node, int64_t cpu_milli, int64_t memory_mib,
                           std::span<const int16_t> gpu_milli) {
  assert(node >= 0 && node < size());
  assert(cpu_milli <= cpu_total_[node] && memory_mib <= memory_total_[node]);
  assert(static_cast<int>(gpu_milli.size()) == gpu_begin_[node + 1] - gpu_begin_[node]);
  cpu_free_[node] = cpu_milli;
  memory_free_[node] = memory_mib;
  std::copy(gpu_milli.begin(), gpu_milli.end(), gpu_free_.begin() + gpu_begin_[node]);
  generation_[node] = NextGeneration();
}

void ClusterState::SetTieRanks(std::vector<int> ranks) {
  assert(static_cast<int>(ranks.size()) == size());
  tie_rank_ = std::move(ranks);
}

}  // namespace gpupool::pool::placement
