#include "pool/placement/policy_registry.h"

#include <array>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pool/placement/baselines.h"
#include "pool/placement/fgd.h"
#include "pool/placement/gpupool_policy.h"

namespace gpupool::pool::placement {
namespace {

constexpr std::array<std::string_view, 6> kNames = {"gpupool",  "fgd",    "best-fit",
                                                    "first-fit", "random", "dot-product"};

ShapeDistribution PaperTypicalShapes(const PolicyContext& context) {
  static const ModelIndex kNoModels;
  return ShapeDistribution::Typical(context.workload,
                                    context.models != nullptr ? *context.models : kNoModels);
}

}  // namespace

std::span<const std::string_view> PolicyNames() { return kNames; }

std::string_view CanonicalPolicyName(std::string_view name) {
  return name == "default" ? kNames[0] : name;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePolicy(std::string_view name,
                                                             const PolicyContext& context) {
  name = CanonicalPolicyName(name);
  if (name == "gpupool") return MakeGpupoolPolicy();
  if (name == "fgd") return MakeFgdPolicy(PaperTypicalShapes(context));
  if (name == "best-fit") return MakeBestFitPolicy();
  if (name == "first-fit") return MakeFirstFitPolicy();
  if (name == "random") return MakeRandomPolicy(context.seed);
  if (name == "dot-product") return MakeDotProductPolicy();
  std::string allowed = "default";
  for (std::string_view n : kNames) allowed += ", " + std::string(n);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", std::string(name), "' (allowed: ", allowed, ")"));
}

}  // namespace gpupool::pool::placement
