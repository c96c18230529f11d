#include "absl/strings/string_view.h"
#include "pool/devices/pool_spec.h"

#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpupool::pool {
namespace {

absl::Status SpecError(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid simulation spec '", spec, "': ", why,
      " (expected COUNTxMODEL[,COUNTxMODEL...], e.g. 4xH100-80GB,2xL4)"));
}

}  // namespace

void AssignDefaultNvLinkIslands(SimulatedNodeSpec& node) {
  std::map<const GpuModel*, std::string> island_of_model;
  for (SimulatedGpuSpec& gpu : node.gpus) {
    if (!gpu.nvlink_island.empty() || gpu.model->nvlink.links == 0) continue;
    auto [it, inserted] = island_of_model.try_emplace(gpu.model, "");
    if (inserted) it->second = absl::StrCat("nvl", island_of_model.size() - 1);
    gpu.nvlink_island = it->second;
  }
}

absl::StatusOr<SimulatedPoolSpec> ParseSimulationSpec(absl::string_view spec, int node_count) {
  if (node_count < 1 || node_count > kMaxSimulatedNodes) {
    return absl::InvalidArgumentError(absl::StrCat("node count ", node_count, " is outside 1..",
                                                   kMaxSimulatedNodes));
  }
  absl::string_view trimmed = absl::StripAsciiWhitespace(spec);
  if (trimmed.empty()) return SpecError(spec, "it is empty");
  SimulatedNodeSpec node;
  for (absl::string_view item : absl::StrSplit(trimmed, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) return SpecError(spec, "it has an empty item");
    size_t x = item.find_first_of("xX");
    if (x == absl::string_view::npos || x == 0) {
      return SpecError(spec, absl::StrCat("item '", item, "' has no COUNTx prefix"));
    }
    absl::string_view count_text = item.substr(0, x);
    int count = 0;
    auto [end, ec] = std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    if (ec != std::errc() || end != count_text.data() + count_text.size()) {
      return SpecError(spec, absl::StrCat("item '", item, "' has a count that is not a number"));
    }
    if (count < 1) return SpecError(spec, absl::StrCat("item '", item, "' has a count below 1"));
    absl::string_view model_name = item.substr(x + 1);
    const GpuModel* model = FindGpuModel(model_name);
    if (model == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("invalid simulation spec '", spec,
                                                     "': unknown GPU model '", model_name,
                                                     "' (known: ", KnownGpuModelNames(), ")"));
    }
    if (node.gpus.size() + count > static_cast<size_t>(kMaxGpusPerNode)) {
      return SpecError(spec, absl::StrCat("a node holds at most ", kMaxGpusPerNode, " GPUs"));
    }
    for (int i = 0; i < count; ++i) node.gpus.push_back(SimulatedGpuSpec{model});
  }
  AssignDefaultNvLinkIslands(node);
  SimulatedPoolSpec pool;
  for (int n = 0; n < node_count; ++n) {
    node.name = absl::StrCat("node-", n);
    pool.nodes.push_back(node);
  }
  return pool;
}

std::string DescribePool(const SimulatedPoolSpec& spec) {
  auto describe_node = [](const SimulatedNodeSpec& node) {
    std::vector<std::pair<std::string, int>> groups;
    for (const SimulatedGpuSpec& gpu : node.gpus) {
      if (groups.empty() || groups.back().first != gpu.model->name) {
        groups.emplace_back(gpu.model->name, 0);
      }
      ++groups.back().second;
    }
    return absl::StrJoin(groups, " + ", [](std::string* out, const auto& g) {
      absl::StrAppend(out, g.second, " ", g.first);
    });
  };
  bool uniform = true;
  for (const SimulatedNodeSpec& node : spec.nodes) {
    uniform = uniform && describe_node(node) == describe_node(spec.nodes.front());
  }
  if (spec.nodes.empty()) return "an empty pool";
  size_t n = spec.nodes.size();
  if (uniform) {
    std::string gpus = describe_node(spec.nodes.front());
    if (gpus.empty()) gpus = "no GPUs";
    bool several_groups = gpus.find(" + ") != std::string::npos;
    return absl::StrCat(n, " node", n == 1 ? "" : "s", " x ", several_groups ? "(" : "", gpus,
                        several_groups ? ")" : "");
  }
  size_t total = 0;
  for (const SimulatedNodeSpec& node : spec.nodes) total += node.gpus.size();
  return absl::StrCat(n, " nodes, ", total, " GPUs");
}

}  // namespace gpupool::pool
