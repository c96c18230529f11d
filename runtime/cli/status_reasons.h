// File: runtime/cli/status_reasons.h
//
// `gpupool status --reasons` (like `sinfo -R`): the GPUs that are not plainly healthy, with their
// state, why, since when and who drained them, from the head's report (`status --json`).
#ifndef GPUPOOL_RUNTIME_CLI_STATUS_REASONS_H_
#define GPUPOOL_RUNTIME_CLI_STATUS_REASONS_H_

#include "nlohmann/json.hpp"

namespace gpupool::cli {

// Prints a table (or, with `as_json`, a JSON array of {gpu, health, reasons, since_s, drained_by,
// drain_reason, last_diagnostic_s, last_diagnostic_result}) to stdout.
void PrintHealthReasons(const nlohmann::json& report, bool as_json);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_STATUS_REASONS_H_
