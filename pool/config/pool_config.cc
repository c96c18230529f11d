#include "absl/strings/string_view.h"
#include "pool/config/pool_config.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/mig_planner.h"
#include "yaml-cpp/yaml.h"

namespace gpupool::pool {
namespace {

// The `nodes:` and `prices:` sections.
class NodesReader {
 public:
  explicit NodesReader(const ConfigReader& reader) : r_(reader) {}

  absl::StatusOr<const GpuModel*> Model(const YAML::Node& n, absl::string_view path) const {
    absl::StatusOr<std::string> name = r_.String(n, path);
    if (!name.ok()) return name.status();
    absl::StatusOr<const GpuModel*> model = RequireGpuModel(*name);
    if (!model.ok()) return r_.Error(n, path, model.status().message());
    return model;
  }

  absl::Status ReadGpuGroup(const YAML::Node& g, const std::string& path,
                            SimulatedNodeSpec& node) const {
    if (absl::Status s = r_.CheckKeys(g, path, {"model", "count", "mig", "nvlink_island", "labels"});
        !s.ok()) {
      return s;
    }
    if (!g["model"]) return r_.Error(g, path, "needs a model");
    SimulatedGpuSpec gpu;
    absl::StatusOr<const GpuModel*> model = Model(g["model"], path + ".model");
    if (!model.ok()) return model.status();
    gpu.model = *model;
    int count = 1;
    if (g["count"]) {
      absl::StatusOr<int> c = r_.Int(g["count"], path + ".count", 1, kMaxGpusPerNode);
      if (!c.ok()) return c.status();
      count = *c;
    }
    if (const YAML::Node& mig = g["mig"]) {
      if (!mig.IsSequence()) return r_.Error(mig, path + ".mig", "must be a list of MIG profiles");
      if (!gpu.model->SupportsMig()) {
        return r_.Error(mig, path + ".mig", absl::StrCat(gpu.model->name, " does not support MIG"));
      }
      gpu.mig_enabled = true;
      for (const auto& p : mig) {
        absl::StatusOr<std::string> name = r_.String(p, path + ".mig[]");
        if (!name.ok()) return name.status();
        gpu.mig_profiles.push_back(*name);
      }
      // Refuse a layout the hardware would refuse now, not when the driver starts.
      absl::StatusOr<std::vector<MigPlacement>> plan =
          PlanMigLayout(MigLayout(*gpu.model), gpu.mig_profiles);
      if (!plan.ok()) return r_.Error(mig, path + ".mig", plan.status().message());
    }
    if (g["nvlink_island"]) {
      absl::StatusOr<std::string> island = r_.String(g["nvlink_island"], path + ".nvlink_island");
      if (!island.ok()) return island.status();
      gpu.nvlink_island = *island;
    }
    if (g["labels"]) {
      absl::StatusOr<std::map<std::string, std::string>> labels = r_.Labels(g["labels"], path + ".labels");
      if (!labels.ok()) return labels.status();
      gpu.labels = *labels;
    }
    if (node.gpus.size() + count > static_cast<size_t>(kMaxGpusPerNode)) {
      return r_.Error(g, path, absl::StrCat("a node holds at most ", kMaxGpusPerNode, " GPUs"));
    }
    for (int i = 0; i < count; ++i) node.gpus.push_back(gpu);
    return absl::OkStatus();
  }

  absl::Status ReadNodes(const YAML::Node& nodes, SimulatedPoolSpec& pool) const {
    if (!nodes.IsSequence()) return r_.Error(nodes, "nodes", "must be a list of nodes");
    std::set<std::string> names;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const YAML::Node& n = nodes[i];
      std::string path = absl::StrCat("nodes[", i, "]");
      if (absl::Status s = r_.CheckKeys(n, path, {"name", "count", "labels", "gpus", "cpus", "memory_gib"}); !s.ok()) return s;
      SimulatedNodeSpec node;
      std::string name = absl::StrCat("node-", i);
      if (n["name"]) {
        absl::StatusOr<std::string> s = r_.String(n["name"], path + ".name");
        if (!s.ok()) return s.status();
        if (s->empty()) return r_.Error(n["name"], path + ".name", "must not be empty");
        name = *s;
      }
      int count = 1;
      if (n["count"]) {
        absl::StatusOr<int> c = r_.Int(n["count"], path + ".count", 1, kMaxSimulatedNodes);
        if (!c.ok()) return c.status();
        count = *c;
      }
      if (n["labels"]) {
        absl::StatusOr<std::map<std::string, std::string>> labels = r_.Labels(n["labels"], path + ".labels");
        if (!labels.ok()) return labels.status();
        node.labels = *labels;
      }
      // Host capacity that requests' CPU and memory count against (absent: not counted).
      if (n["cpus"]) {
        absl::StatusOr<int> c = r_.Int(n["cpus"], path + ".cpus", 1, 100000);
        if (!c.ok()) return c.status();
        node.cpu_milli = int64_t{*c} * 1000;
      }
      if (n["memory_gib"]) {
        absl::StatusOr<int> m = r_.Int(n["memory_gib"], path + ".memory_gib", 1, 1 << 24);
        if (!m.ok()) return m.status();
        node.memory_mib = int64_t{*m} * 1024;
      }
      if (!n["gpus"] || !n["gpus"].IsSequence()) {
        return r_.Error(n, path + ".gpus", "needs a list of GPU groups ({model, count, ...})");
      }
      for (size_t j = 0; j < n["gpus"].size(); ++j) {
        if (absl::Status s = ReadGpuGroup(n["gpus"][j], absl::StrCat(path, ".gpus[", j, "]"), node);
            !s.ok()) {
          return s;
        }
      }
      AssignDefaultNvLinkIslands(node);
      for (int c = 0; c < count; ++c) {
        node.name = count == 1 ? name : absl::StrCat(name, "-", c);
        if (!names.insert(node.name).second) {
          return r_.Error(n, path + ".name", absl::StrCat("node name '", node.name, "' is used twice"));
        }
        pool.nodes.push_back(node);
      }
    }
    if (pool.nodes.empty()) return r_.Error(nodes, "nodes", "must list at least one node");
    return absl::OkStatus();
  }

 private:
  const ConfigReader& r_;
};

}  // namespace

double PoolConfig::PricePerHour(const GpuModel& model) const {
  auto it = prices.find(model.name);
  return it == prices.end() ? model.default_price_per_hour : it->second;
}

absl::StatusOr<PoolConfig> ParsePoolConfig(absl::string_view yaml_text, absl::string_view source) {
  ConfigReader reader(source);
  NodesReader nodes_reader(reader);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": invalid YAML: ", e.msg));
  }
  PoolConfig config;
  config.scheduling = DefaultSchedulingConfig();
  if (root.IsNull()) return config;  // an empty file is a valid, empty configuration
  try {
    if (absl::Status s = reader.CheckKeys(
            root, "top level", {"nodes", "prices", "model_groups", "priority_classes", "teams", "reserve"});
        !s.ok()) {
      return s;
    }
    if (const YAML::Node& prices = root["prices"]) {
      if (!prices.IsMap()) return reader.Error(prices, "prices", "must map GPU models to USD per hour");
      for (const auto& kv : prices) {
        std::string path = absl::StrCat("prices.", kv.first.as<std::string>());
        absl::StatusOr<const GpuModel*> model = nodes_reader.Model(kv.first, path);
        if (!model.ok()) return model.status();
        absl::StatusOr<double> price = reader.Double(kv.second, path);
        if (!price.ok()) return price.status();
        if (*price < 0) return reader.Error(kv.second, path, "a price cannot be negative");
        config.prices[(*model)->name] = *price;
      }
    }
    if (const YAML::Node& nodes = root["nodes"]) {
      SimulatedPoolSpec pool;
      if (absl::Status s = nodes_reader.ReadNodes(nodes, pool); !s.ok()) return s;
      config.simulated_nodes = std::move(pool);
    }
    // With nodes declared, the capacity is known here and a reserve is checked against it now.
    std::map<std::string, int> gpus_per_model;
    if (config.simulated_nodes.has_value()) {
      for (const SimulatedNodeSpec& node : config.simulated_nodes->nodes) {
        for (const SimulatedGpuSpec& gpu : node.gpus) ++gpus_per_model[gpu.model->name];
      }
    }
    if (absl::Status s = ReadSchedulingConfig(reader, root, config.scheduling,
                                              config.simulated_nodes.has_value() ? &gpus_per_model : nullptr);
        !s.ok()) {
      return s;
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on type conversions we did not guard; report it with its position.
    return absl::InvalidArgumentError(absl::StrCat(source, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": ", e.msg));
  }
  return config;
}

absl::StatusOr<PoolConfig> LoadPoolConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read config file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParsePoolConfig(text.str(), path);
}

}  // namespace gpupool::pool
