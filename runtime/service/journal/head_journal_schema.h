// File: runtime/service/journal/head_journal_schema.h
//
// The head journal's tables, and the one check that guards them: a journal written by another
// schema version is refused with both versions named, never read with the wrong meaning. A new
// file gets the current schema; an SQLite file that is not a journal is refused, not annexed.
//
// Schema version 1:
//   meta(key, value)                      schema_version
//   jobs(job_id PK, ...)                  connected sessions
//   nodes(node PK, ...)                   agents and their inventories
//   requests(seq PK, request_id UNIQUE)   the queue; seq keeps the order requests arrived in
//   leases(lease_id PK, ...)              live leases with their accounting fields
//   ledger(seq PK, ...)                   closed leases, append-only; indexed by end time
//   checkpoints((task_key, version) PK)   every committed checkpoint version
// Version 2 adds history(seq PK, t_s, scope, ...), the sampled aggregates; version 3
// health_events(seq PK, t_s, node, gpu, from_state, to_state, reason, actor, reasons, drained_by,
// drain_reason): every transition of a GPU's health and every operator's word on it, with the
// GPU's state after it; version 4 adds ledger.job (the job a closed lease served,
// kJobOfRequestSql; '' for rows closed before version 4) and ledger.busy_gpu_s (pool seconds x
// GPUs its tasks ran, as the job said at release; -1: unknown).
// The job_id columns of jobs, requests and leases hold a job's *key*, a secret it reclaims with:
// never copied into the ledger or shown.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_SCHEMA_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_SCHEMA_H_

#include "absl/status/status.h"
#include "runtime/service/journal/head_journal_sqlite.h"

namespace gpupool::runtime {

// 1: jobs, nodes, requests, leases, ledger, checkpoints; 2: history; 3: health_events;
// 4: ledger.job, busy_gpu_s.
inline constexpr int kJournalSchemaVersion = 4;

// SQL for the job a lease served, from its `request_id` column: a job names its own requests and
// the head prefixes them with "s<N>/" (pool_ids.h); the runtime names them "<job id>/<team>/...",
// so the job is what lies between the first and the second '/' (the whole client id when it has
// no '/'). Public, unlike the job's key.
inline constexpr char kJobOfRequestSql[] =
    "(CASE WHEN instr(substr(request_id, instr(request_id, '/') + 1), '/') > 0"
    " THEN substr(substr(request_id, instr(request_id, '/') + 1), 1,"
    "             instr(substr(request_id, instr(request_id, '/') + 1), '/') - 1)"
    " ELSE substr(request_id, instr(request_id, '/') + 1) END)";

// Creates the tables when the database is empty; otherwise checks that it is a journal of
// kJournalSchemaVersion, upgrading an older one in place by its numbered migrations
// (head_journal_schema.cc). FailedPrecondition for another version or a foreign database; DataLoss
// (from SQLite) for a file that is not a database. Call on the write connection, before any
// other use, while holding the journal's file lock.
absl::Status EnsureJournalSchema(sqlite::Db& db);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_SCHEMA_H_
