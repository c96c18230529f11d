// File: runtime/service/head_report_json.h
//
// The head's reports as JSON: the operators' view (`gpupool status` / `queue`; PoolServer::Report
// and PoolService.describe) and the ledger's usage (`gpupool usage`; PoolService.usage). Each is
// a function of what it reads, and changes nothing. Internal to the service's RPC server.
//
//   std::string json = HeadReportJson(HeadView{pool, agents, sessions, durable.kept()});
//   absl::StatusOr<std::string> usage = UsageJson(durable.journal(), from_s, to_s, "team");
//
// Threads: the server's loop thread (what they read is confined to it).
#ifndef GPUPOOL_RUNTIME_SERVICE_HEAD_REPORT_JSON_H_
#define GPUPOOL_RUNTIME_SERVICE_HEAD_REPORT_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "runtime/service/agent_registry.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/reclaim_book.h"
#include "runtime/service/session_directory.h"

namespace gpupool::runtime {

// What the operators' view reads. Only read (the pool's accessors that are not const, such as
// driver(), change nothing either).
struct HeadView {
  PoolService& pool;
  const AgentRegistry& agents;
  const SessionDirectory& sessions;  // the team of each pending request
  const ReclaimBook& kept;           // what waits for a job that is away
};

// Nodes with their agents and GPUs, leases held, requests pending with the reason each waits.
std::string HeadReportJson(const HeadView& view);

// GPU-hours of the leases closed in [from_s, to_s] (Unix seconds), grouped by `group_by` (team,
// project, class, workload or model), as a JSON array. FailedPrecondition without a journal,
// InvalidArgument for another grouping; the journal's error when it cannot be read.
absl::StatusOr<std::string> UsageJson(HeadJournal* journal, double from_s, double to_s, const std::string& group_by);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HEAD_REPORT_JSON_H_
