// File: pool/placement/online_shapes.h
//
// The expected shapes of work, learned as requests arrive: a histogram of request shapes whose
// older observations weigh less (each weight halves every `half_life` observations). A policy that
// measures fragmentation against "the workload" (fragmentation_model.h) needs a distribution of
// shapes; the head cannot know its future requests, and a simulator that hands the policy the
// whole trace in advance measures a scheduler no one can run. Both feed this instead, one request
// at a time, in arrival order.
//
//   OnlineShapes shapes;
//   shapes.Observe(request);                  // every request the pool receives, once
//   if (shapes.version() != v) model = FragmentationModel(shapes.Distribution()), v = shapes.version();
//
// Deterministic (counts only, no clocks) and thread-compatible.
#ifndef GPUPOOL_POOL_PLACEMENT_ONLINE_SHAPES_H_
#define GPUPOOL_POOL_PLACEMENT_ONLINE_SHAPES_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "pool/placement/pod_request.h"
#include "pool/placement/shape_distribution.h"

namespace gpupool::pool::placement {

struct OnlineShapesOptions {
  // Observations after which an observation's weight has halved: long enough that a stationary
  // workload is seen whole, short enough that a pool whose work changes follows it within days.
  double half_life = 20000;
  // The distribution is worth rebuilding (version() moves) once the observations since the last
  // rebuild reach this share of the decayed weight (and at least one): at first after every
  // request, then more and more rarely until the weight levels off at about half_life / ln 2
  // observations, and from there every rebuild_share of that.
  double rebuild_share = 0.05;
  // Whether host memory is part of a shape's key (memory-aware policies).
  bool key_memory = true;
  // Once every half_life observations, shapes whose share of the weight has fallen below this are
  // forgotten: a long-lived head sees ever new shapes (CPU and memory vary freely), and one whose
  // share is down to 1e-9 (some 20-30 half-lives unseen, fewer for a shape that was rare)
  // weighs nothing in any model. So the histogram stays as big as the shapes of the last tens of
  // half-lives, not of the pool's whole life.
  double forget_below_share = 1e-9;
};

class OnlineShapes {
 public:
  explicit OnlineShapes(OnlineShapesOptions options = {});

  // Counts one request. Requests with no GPU are counted too (they use the CPU and memory GPU
  // work needs) but FragmentationModel ignores them.
  void Observe(const PodRequest& request);

  // The learned shapes, each with its share of the decayed weight (all shapes kept: rare ones,
  // such as 8-GPU gangs, matter most when they come).
  ShapeDistribution Distribution() const;

  // Increases each time enough has been observed that the distribution is worth rebuilding.
  uint64_t version() const { return version_; }
  int64_t observations() const { return observations_; }
  // Shapes remembered now.
  size_t size() const { return weights_.size(); }

 private:
  struct Key {
    int64_t cpu_milli;
    int64_t memory_mib;
    int num_gpu;
    int gpu_milli;
    bool any_model;
    uint64_t model_mask;

    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.cpu_milli, k.memory_mib, k.num_gpu, k.gpu_milli, k.any_model,
                        k.model_mask);
    }
  };

  OnlineShapesOptions options_;
  // Weights are stored multiplied by `scale_` (which grows with every observation instead of
  // every weight shrinking); renormalised before it overflows.
  absl::flat_hash_map<Key, double> weights_;
  double scale_ = 1;
  double growth_;  // 2^(1/half_life)
  double total_ = 0;  // sum of weights_, scaled alike
  int64_t since_rebuild_ = 0;
  int64_t since_forget_ = 0;
  int64_t observations_ = 0;
  uint64_t version_ = 0;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_ONLINE_SHAPES_H_
