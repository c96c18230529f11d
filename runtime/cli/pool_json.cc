#include "runtime/cli/pool_json.h"

namespace gpupool::cli {

nlohmann::json PoolToJson(const PoolDescription& pool) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeInfo& node : pool.nodes) {
    nlohmann::json gpus = nlohmann::json::array();
    for (const GpuInfo& g : node.gpus) {
      nlohmann::json instances = nlohmann::json::array();
      for (const MigInstance& mi : g.instances) {
        nlohmann::json cis = nlohmann::json::array();
        for (const ComputeInstance& ci : mi.compute_instances) {
          cis.push_back({{"id", ci.id}, {"profile", ci.profile}});
        }
        instances.push_back({{"id", mi.id},
                             {"profile", mi.profile},
                             {"start", mi.start},
                             {"size", mi.size},
                             {"uuid", mi.uuid},
                             {"compute_instances", cis}});
      }
      gpus.push_back({
          {"index", g.index},
          {"model", g.model},
          {"name", g.name},
          {"uuid", g.uuid},
          {"memory_mib", g.memory_mib},
          {"compute_capability",
           std::to_string(g.compute_capability_major) + "." +
               std::to_string(g.compute_capability_minor)},
          {"sm_count", g.sm_count},
          {"mig_mode", g.mig_mode},
          {"instances", instances},
          {"nvlink_island", g.nvlink_island},
          {"pci_bus_id", g.pci_bus_id},
          {"numa_node", g.numa_node},
          {"health", g.health},
          {"health_reasons", g.health_reasons},
          {"temperature_c", g.temperature_c},
          {"price_per_hour", g.price_per_hour},
          {"labels", g.labels},
      });
    }
    nodes.push_back({{"name", node.name}, {"labels", node.labels}, {"gpus", gpus}});
  }
  return {{"driver", pool.driver}, {"nodes", nodes}};
}

}  // namespace gpupool::cli
