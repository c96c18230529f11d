// File: pool/config/pool_config.h
//
// Reads the pool's YAML configuration file (`--config FILE`): the simulated nodes, price
// overrides, and the scheduling policy (model groups, priority classes, teams and their quotas, in
// the spirit of Kueue's ClusterQueue objects; see scheduling_config.h). The schema, with every field, is in docs/config.md;
// examples/pool.yaml is a complete example:
//
//   prices:                      # USD per GPU-hour, overriding the catalogue's defaults
//     H100-80GB: 3.20
//   nodes:
//     - name: dgx                # with count > 1: dgx-0, dgx-1, ...
//       count: 2
//       labels: {rack: r1}
//       gpus:
//         - {model: H100-80GB, count: 8}
//     - name: infer
//       gpus:
//         - model: A100-80GB
//           count: 2
//           mig: [3g.40gb, 2g.20gb, 2g.20gb]   # MIG enabled, this layout carved at start
//           nvlink_island: a                    # optional; default: one per NVLink model
//           labels: {tier: inference}
//
// Every error names the file, the line and column, and the field path ("nodes[1].gpus[0].mig"),
// then says what is wrong and what is allowed. Unknown keys are errors, not silently ignored.
#ifndef GPUPOOL_POOL_CONFIG_POOL_CONFIG_H_
#define GPUPOOL_POOL_CONFIG_POOL_CONFIG_H_

#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "pool/config/scheduling_config.h"
#include "pool/devices/pool_spec.h"

namespace gpupool::pool {

struct PoolConfig {
  std::optional<SimulatedPoolSpec> simulated_nodes;  // absent when the file has no `nodes:`
  std::map<std::string, double> prices;              // catalogue name -> USD per GPU-hour
  SchedulingConfig scheduling;                       // teams, quotas, priority classes

  // The configured price, else the catalogue's default.
  double PricePerHour(const GpuModel& model) const;
};

// `source_name` is used in messages (the file's path).
absl::StatusOr<PoolConfig> ParsePoolConfig(absl::string_view yaml_text,
                                           absl::string_view source_name);
absl::StatusOr<PoolConfig> LoadPoolConfig(const std::string& path);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_CONFIG_POOL_CONFIG_H_
