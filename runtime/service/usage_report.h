// File: runtime/service/usage_report.h
//
// `gpupool usage` as the head computes it: the ledger's GPU-hours (HeadJournal::UsageCells)
// regrouped by what the caller asks for, restricted to what the viewer may see, and priced
// (chargeback, in OpenCost's model: cost = slice-weighted GPU-hours x the model's price per hour).
// Capacity is every declared GPU for the whole period; the rows plus `unavailable` (GPUs down or
// drained) plus `idle` add up to it. Each row's cost is rounded half-even to the cent and idle
// takes the remainder, so the parts sum to the capacity's cost to the cent. With `idle_share`,
// idle is spread over the rows in proportion to their cost instead (what is left after rounding
// stays in `idle`).
//
// A team's viewer sees its own team's rows; what the other teams used is one `other_teams` line,
// so the parts still add up without naming anyone.
//
//   absl::StatusOr<nlohmann::json> r = UsageReport(cells, query, viewer, config, capacity);
//
// A pure function of its arguments: thread-safe.
#ifndef GPUPOOL_RUNTIME_SERVICE_USAGE_REPORT_H_
#define GPUPOOL_RUNTIME_SERVICE_USAGE_REPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "pool/config/pool_config.h"
#include "runtime/service/head_auth.h"
#include "runtime/service/journal/head_journal_records.h"

namespace gpupool::runtime {

struct UsageQuery {
  double from_s = 0;  // Unix seconds; <= 0: from the beginning (capacity is then not known)
  double to_s = 0;    // Unix seconds, > from_s
  // team, project, class, workload, model, cost-center or job.
  std::string group_by = "team";
  bool idle_share = false;
};

// What the pool could have delivered in the period, per GPU model, in GPU-hours.
struct UsageCapacity {
  std::map<std::string, double> declared_gpu_hours;     // every declared GPU for the whole period
  std::map<std::string, double> unavailable_gpu_hours;  // of those, down or drained
};

// The groupings UsageReport knows, for error messages and --help.
inline constexpr char kUsageGroupings[] = "team, project, class, workload, model, cost-center or job";

// Cents, rounded half-even (banker's rounding), of `usd`.
int64_t RoundCentsHalfEven(double usd);

// InvalidArgument naming the grouping when it is not one of kUsageGroupings. Capacity (and so
// idle and unavailable) is reported only for a bounded period (query.from_s > 0).
absl::StatusOr<nlohmann::json> UsageReport(const std::vector<UsageCell>& cells, const UsageQuery& query,
                                           const Viewer& viewer, const pool::PoolConfig& config,
                                           const UsageCapacity& capacity);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_USAGE_REPORT_H_
