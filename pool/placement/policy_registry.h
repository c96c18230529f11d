// File: pool/placement/policy_registry.h
//
// Policies by name, for the command line and the simulator:
//   gpupool (alias: default)  our fragmentation-aware packing policy, the pool's default
//   fgd                       Fragmentation Gradient Descent (ATC '23)
//   best-fit, first-fit, random, dot-product   the paper's baselines (baselines.h)
//
//   PolicyContext context{&state.models(), samples, /*seed=*/42};
//   absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy("fgd", context);
#ifndef GPUPOOL_POOL_PLACEMENT_POLICY_REGISTRY_H_
#define GPUPOOL_POOL_PLACEMENT_POLICY_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pool/placement/model_set.h"
#include "pool/placement/placement_policy.h"
#include "pool/placement/shape_distribution.h"

namespace gpupool::pool::placement {

// What a policy may know before the first decision.
struct PolicyContext {
  // The cluster's model index, to resolve the workload's model constraints. Must outlive the call.
  const ModelIndex* models = nullptr;
  // The tasks the cluster is expected to receive (in the simulator: the trace's pod list), for
  // FGD, which (as its paper defines it) derives its target shape distribution from the whole
  // trace in advance. gpupool's policy ignores it and learns online (PlacementPolicy::Observe).
  std::vector<ShapeSample> workload;
  // Seeds the policy's own random stream, if it has one.
  uint64_t seed = 0;
};

// Canonical names, default first.
std::span<const std::string_view> PolicyNames();

// Maps an alias ("default") to its canonical name; returns other names unchanged.
std::string_view CanonicalPolicyName(std::string_view name);

// Fails with kInvalidArgument naming the allowed policies when `name` is unknown.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePolicy(std::string_view name,
                                                             const PolicyContext& context);

}  // namespace gpupool::pool::placement

#endif  // GPUPOOL_POOL_PLACEMENT_POLICY_REGISTRY_H_
