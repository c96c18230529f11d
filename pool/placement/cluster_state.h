// File: pool/placement/cluster_state.h
//
// The free capacity of a set of nodes, stored column-wise for the scoring loops, and the read-only
// view of it that placement policies receive. The owner (the trace simulator, later the pool
// scheduler) applies decisions; policies only read.
//
//   auto state = ClusterState::Create(nodes);          // all capacity free, ties ranked by name
//   Decision d = policy.Decide(state->view(), request);
//   if (d.placed()) state->Apply(d.node, request, d.gpus);
#ifndef GPUPOOL_POOL_PLACEMENT_CLUSTER_STATE_H_
#define GPUPOOL_POOL_PLACEMENT_CLUSTER_STATE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/placement/model_set.h"
#include "pool/placement/pod_request.h"

namespace gpupool::pool::placement {

// The capacity an owner gives a node that does not count a host dimension (the pool's nodes that
// declare no CPU or memory): more than any request asks, small enough that sums over a request's
// slots cannot overflow. Policies that score a dimension leave it out on such a node
// (ClusterView::cpu_counted) instead of seeing it as ever-empty.
inline constexpr int64_t kUncountedCapacity = int64_t{1} << 50;

// A node as inventoried: its name, GPU model label (empty for a node without GPUs) and capacity.
struct NodeCapacity {
  std::string name;
  std::string model;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;
};

// One node's free and total capacity, as a policy sees it.
struct NodeView {
  std::string_view name;
  std::string_view model;
  int model_id = -1;
  int64_t cpu_milli_free = 0;
  int64_t cpu_milli_total = 0;
  int64_t memory_mib_free = 0;
  int64_t memory_mib_total = 0;
  std::span<const int16_t> gpu_milli_free;  // one entry per GPU, 0..1000
};

class ClusterState;

// Read-only access to a ClusterState, or to some of its nodes. Cheap to copy; valid while the
// state (and the subset) lives. View indices run over 0..size()-1; id(i) is the node's index in
// the state, stable for its life.
class ClusterView {
 public:
  explicit ClusterView(const ClusterState& state) : state_(&state) {}
  // Only these nodes of `state` (state indices, in any order): what a pre-filter hands a policy.
  ClusterView(const ClusterState& state, std::span<const int> nodes)
      : state_(&state), subset_(nodes), whole_(false) {}

  int size() const;
  int id(int i) const { return whole_ ? i : subset_[i]; }
  int state_size() const;  // nodes of the whole state: the range of id()
  NodeView node(int i) const;
  const ModelIndex& models() const;

  // Hot-path accessors (the filter and score loops touch only these).
  int model_id(int i) const;
  int64_t cpu_free(int i) const;
  int64_t memory_free(int i) const;
  // Whether the node counts its CPU (its total is not kUncountedCapacity).
  bool cpu_counted(int i) const;
  std::span<const int16_t> gpu_free(int i) const;
  // Equally scored nodes are decided by the lowest tie rank.
  int tie_rank(int i) const;
  // Changes whenever node i's free capacity changes, and is never reused by any other node or
  // state: a policy may cache per-node results keyed by (i, generation(i)).
  uint64_t generation(int i) const;

 private:
  const ClusterState* state_;
  std::span<const int> subset_;
  bool whole_ = true;
};

class ClusterState {
 public:
  // All capacity free; tie ranks follow the lexicographic order of node names. Fails with
  // kInvalidArgument on duplicate names, negative capacity, a GPU node without a model label, or
  // more than ModelIndex::kMaxModels models.
  static absl::StatusOr<ClusterState> Create(std::span<const NodeCapacity> nodes);
  // The same, with model ids taken from `models` first (labels it lacks are added after its own),
  // so that several states of one pool agree on ids (a policy's learned shapes name models by id).
  static absl::StatusOr<ClusterState> Create(std::span<const NodeCapacity> nodes, const ModelIndex& models);

  ClusterView view() const { return ClusterView(*this); }
  int size() const { return static_cast<int>(names_.size()); }
  const ModelIndex& models() const { return models_; }
  int64_t total_gpu_milli() const { return int64_t{kMilliPerGpu} * static_cast<int64_t>(gpu_free_.size()); }

  // Takes `request` out of node `node`, its GPU share out of each of `gpus`. The decision must have
  // come from a policy on this state: a request that does not fit is a bug and is asserted.
  void Apply(int node, const PodRequest& request, std::span<const int> gpus);
  // Gives back what Apply took (a departure); the same node, request and GPUs.
  void Release(int node, const PodRequest& request, std::span<const int> gpus);
  // Sets node `node`'s free capacity outright (an owner that mirrors another record of the
  // cluster, such as the pool scheduler's). Each value at most the node's total.
  void SetFree(int node, int64_t cpu_milli, int64_t memory_mib, std::span<const int16_t> gpu_milli);

  // Replaces the tie ranks (a permutation of 0..size()-1, rank per node index), e.g. to emulate the
  // reference simulator, which prefixes node names with a random permutation per seed.
  void SetTieRanks(std::vector<int> ranks);

 private:
  friend class ClusterView;
  ClusterState() = default;

  static uint64_t NextGeneration();

  // Constant after Create.
  ModelIndex models_;
  std::vector<std::string> names_;
  std::vector<int> model_id_;
  std::vector<int64_t> cpu_total_;
  std::vector<int64_t> memory_total_;
  std::vector<int> gpu_begin_;  // node i's GPUs are gpu_free_[gpu_begin_[i] .. gpu_begin_[i+1])

  // Changed by Apply / Release / SetTieRanks.
  std::vector<int64_t> cpu_free_;
  std::vector<int64_t> memory_free_;
  std::vector<int16_t> gpu_free_;
  std::vector<int> tie_rank_;
  std::vector<uint64_t> generation_;
};

inline int ClusterView::size() const { return whole_ ? state_->size() : static_cast<int>(subset_.size()); }
inline int ClusterView::state_size() const { return state_->size(); }
inline const ModelIndex& ClusterView::models() const { return state_->models_; }
inline int ClusterView::model_id(int i) const { return state_->model_id_[id(i)]; }
inline int64_t ClusterView::cpu_free(int i) const { return state_->cpu_free_[id(i)]; }
inline int64_t ClusterView::memory_free(int i) const { return state_->memory_free_[id(i)]; }
inline bool ClusterView::cpu_counted(int i) const { return state_->cpu_total_[id(i)] < kUncountedCapacity; }
inline std::span<const int16_t> ClusterView::gpu_free(int i) const {
  const int n = id(i);
  const int begin = state_->gpu_begin_[n];
  return std::span<const int16_t>(state_->gpu_free_.data() + begin, state_->gpu_begin_[n + 1] - begin);
}
inline int ClusterView::tie_rank(int i) const { return state_->tie_rank_[id(i)]; }
inline uint64_t ClusterView::generation(int i) const { return state_->generation_[id(i)]; }

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_CLUSTER_STATE_H_
