// File: runtime/client/head_report.h
//
// The operators' view of a running head (`gpupool status`, `gpupool queue`): one call over
// RPC that returns the head's report (PoolServer::Report, JSON) to anyone holding a team's or
// the agents' token.
#ifndef GPUPOOL_RUNTIME_CLIENT_HEAD_REPORT_H_
#define GPUPOOL_RUNTIME_CLIENT_HEAD_REPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gpupool::runtime {

// kUnavailable when the head cannot be reached; kUnauthenticated for an unknown token.
absl::StatusOr<std::string> FetchHeadReport(const std::string& host, uint16_t port, const std::string& token);

// GPU-hours and cost from the head's journal over [from_s, to_s) in Unix seconds, grouped by
// "team", "project", "class", "workload", "model", "cost-center" or "job": a JSON object (the head's
// runtime/service/usage_report.h) whose `rows` are {group, gpu_hours, leases, cost, cost_cents}.
// `idle_share`: idle capacity's cost spread over the rows in proportion to use.
absl::StatusOr<std::string> FetchHeadUsage(const std::string& host, uint16_t port, const std::string& token,
                                           double from_s, double to_s, const std::string& group_by,
                                           bool idle_share = false);

// What pooling saved over [from_s, to_s) (Unix seconds) against dedicated fleets, as JSON
// (runtime/service/savings_report.h).
absl::StatusOr<std::string> FetchHeadSavings(const std::string& host, uint16_t port, const std::string& token,
                                             double from_s, double to_s);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_HEAD_REPORT_H_
