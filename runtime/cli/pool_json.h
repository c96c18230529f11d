// File: runtime/cli/pool_json.h
//
// The JSON form of the pool that `gpupool devices --json` prints (and that status commands will
// reuse): {"driver", "nodes": [{"name", "labels", "gpus": [{"index", "model", "name", "uuid",
// "memory_mib", "compute_capability": "9.0", "mig_mode", "instances", "nvlink_island", "health",
// ...}]}]}: every field gpupool::ForEachField (gpupool/pool_description.h) lists, under its name,
// as Python's describe_pool() has them too.
#ifndef GPUPOOL_RUNTIME_CLI_POOL_JSON_H_
#define GPUPOOL_RUNTIME_CLI_POOL_JSON_H_

#include <nlohmann/json.hpp>

#include "gpupool/pool_description.h"

namespace gpupool::cli {

nlohmann::json PoolToJson(const PoolDescription& pool);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_POOL_JSON_H_
