#include "pool/placement/gpupool_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pool/placement/fit.h"
#include "pool/placement/fragmentation_model.h"
#include "pool/placement/kube_select.h"
#include "pool/placement/online_shapes.h"

namespace gpupool::pool::placement {
namespace {

// Nodes with at most this many GPUs get their states memoised (every node in today's catalogue).
constexpr int kMemoGpus = 16;
// The memo is dropped when it grows past this many states, to bound memory on long runs.
constexpr size_t kMemoLimit = 1 << 20;

// A node's state as the fragmentation model sees it: GPU order does not matter, so the free
// shares are sorted.
struct NodeState {
  int model_id = -1;
  int num_gpus = 0;
  int64_t cpu_free = 0;
  int64_t memory_free = 0;
  std::array<int16_t, kMemoGpus> gpu_free{};

  bool operator==(const NodeState&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const NodeState& s) {
    return H::combine(H::combine_contiguous(std::move(h), s.gpu_free.data(), s.num_gpus),
                      s.model_id, s.num_gpus, s.cpu_free, s.memory_free);
  }
};

// FGD's score: the fragmentation decrease squashed to 0..100 and truncated, so that differences
// of a few percent of a GPU tie (see gpupool_policy.h for why that is wanted).
int64_t CoarseScore(double increase) {
  return static_cast<int64_t>(1.0 / (1.0 + std::exp(increase / 1000)) *
                              static_cast<double>(kMaxNodeScore));
}

class GpupoolPolicy final : public PlacementPolicy {
 public:
  GpupoolPolicy() : model_(ShapeDistribution()) {}

  void Observe(const PodRequest& request) override { shapes_.Observe(request); }
  bool ScoresByNodeState() const override { return true; }

  Decision Decide(const ClusterView& cluster, const PodRequest& request) override {
    if (model_version_ != shapes_.version()) {
      // Enough was learned since the model was built: build it again, and forget every value
      // measured against the old one.
      model_ = FragmentationModel(shapes_.Distribution());
      model_version_ = shapes_.version();
      current_.clear();
      memo_.clear();
    }
    // Several views (of states of different sizes) may share this policy: the cache only grows,
    // and an entry of another state's node never matches (generations are unique).
    if (static_cast<int>(current_.size()) < cluster.state_size()) current_.resize(cluster.state_size());
    int best_node = -1;
    GpuIndices best_gpus;
    int64_t best_score = 0;
    for (int n = 0; n < cluster.size(); ++n) {
      if (!NodeFits(cluster, n, request)) continue;
      const double before = Current(cluster, n);
      ForEachOption(cluster, n, request, [&](const GpuIndices& gpus, double after) {
        const int64_t score = CoarseScore(after - before);
        if (best_node < 0 || score > best_score ||
            (score == best_score && cluster.tie_rank(n) < cluster.tie_rank(best_node))) {
          best_node = n;
          best_gpus = gpus;
          best_score = score;
        }
      });
    }
    if (best_node < 0) return Decision::Unschedulable();
    return Decision::Placed(best_node, std::move(best_gpus));
  }

 private:
  struct CachedUnusable {
    uint64_t generation = 0;
    double value = 0;
  };

  // Calls visit(gpus, unusable_after) for each distinct way of placing `request` on node n: every
  // distinct free share for a sharing task (GPUs with the same free share are equivalent; the
  // lowest index stands for them), the default GPU choice otherwise.
  template <typename Visit>
  void ForEachOption(const ClusterView& cluster, int n, const PodRequest& request, Visit visit) {
    std::span<const int16_t> free = cluster.gpu_free(n);
    NodeState after;
    after.model_id = cluster.model_id(n);
    after.cpu_free = cluster.cpu_free(n) - request.cpu_milli;
    after.memory_free = cluster.memory_free(n) - request.memory_mib;
    std::vector<int16_t>& gpus_after = scratch_gpus_;
    gpus_after.assign(free.begin(), free.end());
    if (!request.is_sharing()) {
      GpuIndices gpus = DefaultGpuChoice(free, request);
      for (int g : gpus) gpus_after[g] = static_cast<int16_t>(gpus_after[g] - request.gpu_milli);
      visit(gpus, Unusable(after, gpus_after));
      return;
    }
    for (int g = 0; g < static_cast<int>(free.size()); ++g) {
      if (free[g] < request.gpu_milli) continue;
      bool seen = false;
      for (int h = 0; h < g && !seen; ++h) seen = free[h] == free[g];
      if (seen) continue;
      gpus_after[g] = static_cast<int16_t>(free[g] - request.gpu_milli);
      visit(GpuIndices{g}, Unusable(after, gpus_after));
      gpus_after[g] = free[g];
    }
  }

  double Current(const ClusterView& cluster, int n) {
    CachedUnusable& c = current_[cluster.id(n)];
    if (c.generation != cluster.generation(n)) {
      NodeState state;
      state.model_id = cluster.model_id(n);
      state.cpu_free = cluster.cpu_free(n);
      state.memory_free = cluster.memory_free(n);
      std::span<const int16_t> free = cluster.gpu_free(n);
      c.value = Unusable(state, std::vector<int16_t>(free.begin(), free.end()));
      c.generation = cluster.generation(n);
    }
    return c.value;
  }

  // The model's value for `state` with GPUs `gpus`, memoised by the sorted state.
  double Unusable(NodeState state, const std::vector<int16_t>& gpus) {
    if (static_cast<int>(gpus.size()) > kMemoGpus) {
      return model_.Unusable(state.model_id, state.cpu_free, state.memory_free, gpus);
    }
    state.num_gpus = static_cast<int>(gpus.size());
    std::copy(gpus.begin(), gpus.end(), state.gpu_free.begin());
    std::sort(state.gpu_free.begin(), state.gpu_free.begin() + state.num_gpus, std::greater<>());
    if (auto it = memo_.find(state); it != memo_.end()) return it->second;
    const double value = model_.Unusable(
        state.model_id, state.cpu_free, state.memory_free,
        std::span<const int16_t>(state.gpu_free.data(), state.num_gpus));
    if (memo_.size() >= kMemoLimit) memo_.clear();
    memo_.emplace(state, value);
    return value;
  }

  OnlineShapes shapes_;
  uint64_t model_version_ = 0;  // the shapes_.version() model_ was built from
  FragmentationModel model_;
  std::vector<CachedUnusable> current_;  // per node, valid while its generation matches
  absl::flat_hash_map<NodeState, double> memo_;
  std::vector<int16_t> scratch_gpus_;
};

}  // namespace

std::unique_ptr<PlacementPolicy> MakeGpupoolPolicy() { return std::make_unique<GpupoolPolicy>(); }

}  // namespace gpupool::pool::placement
