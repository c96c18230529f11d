// File: runtime/cli/time_arg.h
//
// A point in time as a person types it on the command line (`usage --since/--until`,
// `savings`): Unix seconds ("1735689600"), ISO 8601 ("2025-01-01", "2025-01-01T12:00:00",
// with "Z" or "+02:00"; UTC when no offset is given), relative to now ("-7d", "-12h", "-30m",
// "-90s", "-2w") or "now".
//
//   absl::StatusOr<double> since = ParseTimeArg("-7d", now_s);
#ifndef GPUPOOL_RUNTIME_CLI_TIME_ARG_H_
#define GPUPOOL_RUNTIME_CLI_TIME_ARG_H_

#include <string>

#include "absl/status/statusor.h"

namespace gpupool::cli {

// Unix seconds; InvalidArgument naming the text and the forms accepted.
absl::StatusOr<double> ParseTimeArg(const std::string& text, double now_s);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_TIME_ARG_H_
