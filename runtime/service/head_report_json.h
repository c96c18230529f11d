// File: runtime/service/head_report_json.h
//
// The head's reports as JSON: the operators' view (`gpupool status` / `queue`; PoolServer::Report
// and PoolService.describe) and the ledger's usage (`gpupool usage`; PoolService.usage). Each is
// a function of what it reads, and changes nothing. Internal to the service's RPC server.
//
//   std::string json = HeadReportJson(HeadView{pool, agents, sessions, durable.kept()}, viewer);
//   absl::StatusOr<std::string> usage = UsageJson(durable.journal(), pool, query, viewer, 60);
//
// Who reads decides what is in them (head_auth.h's Viewer): a team sees every node and GPU with
// its health, the pool's totals, and its own team's leases, requests and usage rows only.
//
// Threads: the server's loop thread (what they read is confined to it).
#ifndef GPUPOOL_RUNTIME_SERVICE_HEAD_REPORT_JSON_H_
#define GPUPOOL_RUNTIME_SERVICE_HEAD_REPORT_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "runtime/service/agent_registry.h"
#include "runtime/service/head_auth.h"
#include "runtime/service/journal/head_journal.h"
#include "runtime/service/pool_service.h"
#include "runtime/service/reclaim_book.h"
#include "runtime/service/session_directory.h"
#include "runtime/service/usage_report.h"

namespace gpupool::runtime {

// What the operators' view reads. Only read (the pool's accessors that are not const, such as
// driver(), change nothing either).
struct HeadView {
  PoolService& pool;
  const AgentRegistry& agents;
  const SessionDirectory& sessions;  // the team of each pending request
  const ReclaimBook& kept;           // what waits for a job that is away
};

// Nodes with their agents and GPUs, leases held, requests pending with the reason each waits, and
// the pool's totals (`totals`: leases and pending requests of every team).
std::string HeadReportJson(const HeadView& view, const Viewer& viewer);

// The team of a pending request: its session's, or, for a request kept for a job that is away,
// the one it was kept with ("" when neither knows it).
std::string TeamOfRequest(const HeadView& view, const std::string& request_id);

// GPU-hours and their cost over [query.from_s, query.to_s) (Unix seconds), grouped as the query
// says (usage_report.h), as a JSON object whose `rows` are the groups. `unavailable` comes from the
// journal's history samples, each standing for `history_interval_s` (sampled_unavailability.h), and
// from the pool's in-memory record (since this head started) for what no sample covers.
// FailedPrecondition without a journal, InvalidArgument for an unknown grouping; the journal's
// error when it cannot be read.
absl::StatusOr<std::string> UsageJson(HeadJournal* journal, PoolService& pool, const UsageQuery& query,
                                      const Viewer& viewer, double history_interval_s);

// The savings report (savings_report.h) over [from_s, to_s) (Unix seconds) from the ledger and
// the leases open now. FailedPrecondition without a journal.
absl::StatusOr<std::string> SavingsJson(HeadJournal* journal, PoolService& pool, double from_s, double to_s,
                                        const Viewer& viewer);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_HEAD_REPORT_JSON_H_
