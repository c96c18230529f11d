// `gpupool devices`: the pool as a table (or JSON), like `sinfo` for GPUs.
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpupool/error.h"
#include "gpupool/pool_description.h"
#include "runtime/cli/command.h"
#include "runtime/cli/pool_json.h"
#include "runtime/cli/text_table.h"

namespace gpupool::cli {
namespace {

struct DevicesFlags {
  PoolOptions pool;
  bool json = false;
};

std::string InstancesCell(const GpuInfo& gpu) {
  if (gpu.instances.empty()) return "-";
  return absl::StrJoin(gpu.instances, " ", [](std::string* out, const MigInstance& mi) {
    absl::StrAppend(out, mi.profile, "@", mi.start);
  });
}

std::string Summary(const PoolDescription& pool) {
  std::map<std::string, int> by_model;
  int gpus = 0;
  for (const NodeInfo& node : pool.nodes) {
    for (const GpuInfo& g : node.gpus) {
      ++by_model[g.model];
      ++gpus;
    }
  }
  std::string models = absl::StrJoin(by_model, ", ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.second, " ", kv.first);
  });
  size_t n = pool.nodes.size();
  return absl::StrCat(n, " node", n == 1 ? "" : "s", ", ", gpus, " GPU", gpus == 1 ? "" : "s",
                      models.empty() ? "" : absl::StrCat(" (", models, ")"), "; driver ",
                      pool.driver);
}

void RunDevices(const DevicesFlags& flags) {
  PoolDescription pool;
  try {
    pool = DescribePool(flags.pool);
  } catch (const Error& e) {
    throw CommandFailed(e.what());
  }
  if (!pool.notice.empty()) std::cerr << pool.notice << "\n";
  if (flags.json) {
    std::cout << PoolToJson(pool).dump(2) << "\n";
    return;
  }
  TextTable table({"NODE", "GPU", "MODEL", "MEMORY", "MIG", "INSTANCES", "NVLINK", "HEALTH"});
  for (const NodeInfo& node : pool.nodes) {
    for (const GpuInfo& g : node.gpus) {
      std::string health(HealthStateName(g.health));
      if (!g.health_reasons.empty()) {
        absl::StrAppend(&health, " (", absl::StrJoin(g.health_reasons, "; "), ")");
      }
      table.AddRow({node.name, std::to_string(g.index), g.model,
                    absl::StrCat(g.memory_mib, " MiB"), std::string(MigModeName(g.mig_mode)), InstancesCell(g),
                    g.nvlink_island, health});
    }
  }
  std::cout << table.Render() << Summary(pool) << "\n";
}

}  // namespace

void RegisterDevicesCommand(CLI::App& app) {
  auto flags = std::make_shared<DevicesFlags>();
  CLI::App* cmd = app.add_subcommand("devices", "Show the pool's nodes and GPUs");
  cmd->add_option("--driver", flags->pool.driver, "nvidia or simulated (default: nvidia when a GPU is present)")
      ->check(CLI::IsMember({"nvidia", "simulated"}));
  cmd->add_option("--simulate", flags->pool.simulate,
                  "GPUs of one simulated node: COUNTxMODEL[,COUNTxMODEL...], e.g. 4xH100-80GB,2xL4");
  cmd->add_option("--node-count", flags->pool.node_count, "Repeat the simulated node N times")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--config", flags->pool.config_path, "YAML pool configuration file");
  cmd->add_flag("--json", flags->json, "Print JSON instead of a table");
  cmd->callback([flags] { RunDevices(*flags); });
}

}  // namespace gpupool::cli
