// File: pool/placement/model_set.h
//
// GPU model constraints as bit sets. A cluster's model labels ("G2", "V100M32", ...) are opaque
// strings; ModelIndex interns them into small ids once, so that the filter step tests a request's
// allowed models with one bit operation per node instead of string comparisons.
//
//   ModelIndex models;
//   int g2 = *models.Intern("G2");
//   ModelSet allowed = models.ResolveSpec("V100M16|G2");   // '|'-separated, repeats allowed
//   allowed.Allows(g2);                                     // true
#ifndef GPUPOOL_POOL_PLACEMENT_MODEL_SET_H_
#define GPUPOOL_POOL_PLACEMENT_MODEL_SET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace gpupool::pool::placement {

// The GPU models a request accepts: any model, or the models whose ids are set in `mask`.
// A constrained set whose labels the cluster does not have is empty and allows nothing.
struct ModelSet {
  static ModelSet Any() { return ModelSet{}; }

  bool Allows(int model_id) const {
    if (any) return true;
    return model_id >= 0 && ((mask >> model_id) & 1u) != 0;
  }

  bool any = true;
  uint64_t mask = 0;
};

class ModelIndex {
 public:
  // Sixty-four models fit the mask; a cluster with more distinct labels is refused at load time.
  static constexpr int kMaxModels = 64;

  // Returns the id of `label`, adding it if it is new. Fails with kInvalidArgument when the index
  // is full or the label is empty.
  absl::StatusOr<int> Intern(std::string_view label);

  std::optional<int> Find(std::string_view label) const;
  const std::string& label(int id) const { return labels_[id]; }
  int size() const { return static_cast<int>(labels_.size()); }

  // Parses a '|'-separated list of labels (empty elements ignored; an empty list means any model).
  // Labels this cluster does not have simply match no node.
  ModelSet ResolveSpec(std::string_view spec) const;

 private:
  std::vector<std::string> labels_;
  absl::flat_hash_map<std::string, int> ids_;
};

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_MODEL_SET_H_
