// File: runtime/service/savings_report.h
//
// `gpupool savings`: what pooling saved over a period, from the ledger. For each team and GPU
// model, the GPUs the team held concurrently over time (slice-weighted) give its peak and its p95
// (the level it stayed at or under for 95% of the period); a dedicated fleet is each team owning
// whole GPUs of that model for that level all period long. Against it: the pooled fleet, every
// declared GPU for the period. Both are priced per model (prices:) and their utilisation is the
// GPU-hours used over the GPU-hours owned.
//
// A team's viewer sees its own rows and the fleets' totals.
//
//   absl::StatusOr<nlohmann::json> r = SavingsReport(intervals, from_s, to_s, viewer, config, declared);
//
// A pure function: thread-safe.
#ifndef GPUPOOL_RUNTIME_SERVICE_SAVINGS_REPORT_H_
#define GPUPOOL_RUNTIME_SERVICE_SAVINGS_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "pool/config/pool_config.h"
#include "runtime/service/head_auth.h"

namespace gpupool::runtime {

// One lease's hold: `gpus` GPU equivalents of `model` over [start_s, end_s) (Unix seconds).
struct HoldInterval {
  std::string team;
  std::string model;
  double gpus = 0;
  double start_s = 0;
  double end_s = 0;
};

// `declared`: the pool's GPUs per model. InvalidArgument for an empty period.
absl::StatusOr<nlohmann::json> SavingsReport(const std::vector<HoldInterval>& holds, double from_s, double to_s,
                                             const Viewer& viewer, const pool::PoolConfig& config,
                                             const std::map<std::string, int>& declared);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_SAVINGS_REPORT_H_
