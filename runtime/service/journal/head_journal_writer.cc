#include "runtime/service/journal/head_journal_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/service/journal/head_journal_schema.h"

namespace gpupool::runtime {

struct JournalWriter::Statements {
  sqlite::Statement begin, commit, rollback;
  sqlite::Statement put_job, delete_job;
  sqlite::Statement put_node, delete_node;
  sqlite::Statement put_request, delete_request;
  sqlite::Statement put_lease, lease_to_ledger, delete_lease;
  sqlite::Statement put_checkpoint, delete_checkpoints;
};

namespace {

// A request keeps its seq (its place in the queue) when recorded again, hence an upsert rather
// than INSERT OR REPLACE, which would delete and re-append it.
constexpr char kPutRequest[] =
    "INSERT INTO requests(request_id, job_id, team, request, submitted_s) VALUES(?1,?2,?3,?4,?5) "
    "ON CONFLICT(request_id) DO UPDATE SET job_id = excluded.job_id, team = excluded.team, "
    "request = excluded.request, submitted_s = excluded.submitted_s";

// The ledger row takes the lease's own accounting columns, in the same transaction as the delete.
// The job column comes from the lease's request id (kJobOfRequestSql), never from its job_id,
// which holds the job's key; the busy time is the job's word, capped at the lease's GPU-seconds.
std::string LeaseToLedgerSql() {
  return absl::StrCat(
      "INSERT INTO ledger(lease_id, team, project, workload_class, priority_class, gpu_model, gpus, "
      "start_s, end_s, end_cause, job, busy_gpu_s) "
      "SELECT lease_id, team, project, workload_class, priority_class, gpu_model, gpus, granted_s, "
      "?2, ?3, ", kJobOfRequestSql, ","
      // A job cannot have been busier than what it held: its figure is capped there.
      " CASE WHEN ?4 < 0 THEN -1 ELSE MIN(?4, MAX(0, (?2 - granted_s) * gpus)) END"
      " FROM leases WHERE lease_id = ?1");
}

absl::Status Prepare(const sqlite::Db& db, const char* sql, sqlite::Statement* out) {
  absl::StatusOr<sqlite::Statement> st = db.Prepare(sql);
  if (!st.ok()) return st.status();
  *out = *std::move(st);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JournalWriter>> JournalWriter::Open(const std::string& path,
                                                                   bool full_sync) {
  absl::StatusOr<std::unique_ptr<sqlite::Db>> db = sqlite::Db::Open(path, /*read_only=*/false);
  if (!db.ok()) return db.status();
  sqlite::Db& d = **db;
  // busy_timeout: the reader's checkpoints and WAL restarts can hold a lock for a moment.
  if (absl::Status st = d.Exec("PRAGMA busy_timeout = 10000", "setting busy_timeout"); !st.ok()) {
    return st;
  }
  // The first statement that reads the file: a non-database fails here (DataLoss, named path).
  absl::StatusOr<std::string> mode = d.QueryText("PRAGMA journal_mode = WAL", "entering WAL mode");
  if (!mode.ok()) return mode.status();
  if (*mode != "wal") {
    return absl::FailedPreconditionError(absl::StrCat(
        "head journal ", path, ": SQLite refused WAL mode (journal_mode is '", *mode,
        "'); the journal needs a local file system with shared memory"));
  }
  if (absl::Status st = d.Exec(full_sync ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
                               "setting synchronous");
      !st.ok()) {
    return st;
  }
  if (absl::Status st = EnsureJournalSchema(d); !st.ok()) return st;

  auto s = std::make_unique<Statements>();
  const std::string lease_to_ledger = LeaseToLedgerSql();
  const std::pair<const char*, sqlite::Statement*> statements[] = {
      {"BEGIN IMMEDIATE", &s->begin},
      {"COMMIT", &s->commit},
      {"ROLLBACK", &s->rollback},
      {"INSERT OR REPLACE INTO jobs(job_id, team, project, connected_s, last_seen_s) "
       "VALUES(?1,?2,?3,?4,?5)", &s->put_job},
      {"DELETE FROM jobs WHERE job_id = ?1", &s->delete_job},
      {"INSERT OR REPLACE INTO nodes(node, agent_address, inventory, last_heartbeat_s) "
       "VALUES(?1,?2,?3,?4)", &s->put_node},
      {"DELETE FROM nodes WHERE node = ?1", &s->delete_node},
      {kPutRequest, &s->put_request},
      {"DELETE FROM requests WHERE request_id = ?1", &s->delete_request},
      {"INSERT OR REPLACE INTO leases(lease_id, request_id, job_id, node, team, project, "
       "workload_class, priority_class, gpu_model, gpus, lease, granted_s) "
       "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)", &s->put_lease},
      {lease_to_ledger.c_str(), &s->lease_to_ledger},
      {"DELETE FROM leases WHERE lease_id = ?1", &s->delete_lease},
      {"INSERT OR REPLACE INTO checkpoints(task_key, version, job_id, path, step, committed_s) "
       "VALUES(?1,?2,?3,?4,?5,?6)", &s->put_checkpoint},
      {"DELETE FROM checkpoints WHERE task_key = ?1", &s->delete_checkpoints},
  };
  for (const auto& [sql, out] : statements) {
    if (absl::Status st = Prepare(d, sql, out); !st.ok()) return st;
  }
  return std::unique_ptr<JournalWriter>(new JournalWriter(*std::move(db), std::move(s)));
}

JournalWriter::JournalWriter(std::unique_ptr<sqlite::Db> db, std::unique_ptr<Statements> s)
    : db_(std::move(db)), s_(std::move(s)) {}

JournalWriter::~JournalWriter() = default;

absl::Status JournalWriter::Commit(const std::vector<JournalOp>& batch) {
  if (absl::Status st = s_->begin.Run("beginning a batch"); !st.ok()) return st;
  absl::Status st;
  for (const JournalOp& op : batch) {
    st = std::visit([this](const auto& o) { return Apply(o); }, op);
    if (!st.ok()) break;
  }
  if (st.ok()) st = s_->commit.Run(absl::StrCat("committing a batch of ", batch.size()));
  // After a failed statement or COMMIT the transaction may still be open; after some I/O errors
  // SQLite has already rolled it back, and this ROLLBACK's own error says only that.
  if (!st.ok()) (void)s_->rollback.Run("rolling back a batch");
  return st;
}

absl::Status JournalWriter::Apply(const JobRecord& job) {
  return s_->put_job.RunWith(absl::StrCat("recording job ", job.job_id), job.job_id, job.team,
                             job.project, job.connected_s, job.last_seen_s);
}

absl::Status JournalWriter::Apply(const JobRemoval& removal) {
  return s_->delete_job.RunWith(absl::StrCat("removing job ", removal.job_id), removal.job_id);
}

absl::Status JournalWriter::Apply(const NodeRecord& node) {
  return s_->put_node.RunWith(absl::StrCat("recording node ", node.node), node.node,
                              node.agent_address, sqlite::Bytes{node.inventory},
                              node.last_heartbeat_s);
}

absl::Status JournalWriter::Apply(const NodeRemoval& removal) {
  return s_->delete_node.RunWith(absl::StrCat("removing node ", removal.node), removal.node);
}

absl::Status JournalWriter::Apply(const RequestRecord& request) {
  return s_->put_request.RunWith(absl::StrCat("recording request ", request.request_id),
                                 request.request_id, request.job_id, request.team,
                                 sqlite::Bytes{request.request}, request.submitted_s);
}

absl::Status JournalWriter::Apply(const RequestRemoval& removal) {
  return s_->delete_request.RunWith(absl::StrCat("removing request ", removal.request_id),
                                    removal.request_id);
}

absl::Status JournalWriter::Apply(const LeaseRecord& lease) {
  const LeaseAccount& a = lease.account;
  absl::Status st = s_->put_lease.RunWith(
      absl::StrCat("recording lease ", lease.lease_id), lease.lease_id, lease.request_id,
      lease.job_id, lease.node, a.team, a.project, a.workload_class, a.priority_class,
      a.gpu_model, a.gpus, sqlite::Bytes{lease.lease}, lease.granted_s);
  if (!st.ok()) return st;
  // The grant consumes the request in the same transaction: never both, never neither.
  return s_->delete_request.RunWith(
      absl::StrCat("removing request ", lease.request_id, " granted as ", lease.lease_id),
      lease.request_id);
}

absl::Status JournalWriter::Apply(const LeaseClosing& closing) {
  std::string what = absl::StrCat("closing lease ", closing.lease_id, " into the ledger");
  absl::Status st =
      s_->lease_to_ledger.RunWith(what, closing.lease_id, closing.end_s, closing.cause, closing.busy_gpu_s);
  if (!st.ok()) return st;
  return s_->delete_lease.RunWith(what, closing.lease_id);
}

absl::Status JournalWriter::Apply(const CheckpointRecord& checkpoint) {
  return s_->put_checkpoint.RunWith(
      absl::StrCat("recording checkpoint ", checkpoint.task_key, " v", checkpoint.version),
      checkpoint.task_key, checkpoint.version, checkpoint.job_id, checkpoint.path,
      checkpoint.step, checkpoint.committed_s);
}

absl::Status JournalWriter::Apply(const CheckpointRemoval& removal) {
  return s_->delete_checkpoints.RunWith(
      absl::StrCat("removing the checkpoints of ", removal.task_key), removal.task_key);
}

absl::Status JournalWriter::Apply(const HistorySample& sample) {
  // Once a minute: preparing here costs nothing worth a cached statement.
  absl::StatusOr<sqlite::Statement> insert = db_->Prepare(
      "INSERT INTO history(t_s, scope, allocated_gpus, capacity_gpus, borrowed_gpus, pending) VALUES(?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) return insert.status();
  for (const HistoryRow& r : sample.rows) {
    insert->Reset();
    absl::Status st = insert->RunWith("recording the pool's history", r.t_s, r.scope, r.allocated_gpus,
                                      r.capacity_gpus, r.borrowed_gpus, r.pending);
    if (!st.ok()) return st;
  }
  absl::StatusOr<sqlite::Statement> prune = db_->Prepare("DELETE FROM history WHERE t_s < ?");
  if (!prune.ok()) return prune.status();
  return prune->RunWith("dropping history past its retention", sample.keep_after_s);
}

absl::Status JournalWriter::Apply(const HealthEventRow& e) {
  // Rare (a GPU's state changes): preparing here costs nothing worth a cached statement.
  absl::StatusOr<sqlite::Statement> insert = db_->Prepare(
      "INSERT INTO health_events(t_s, node, gpu, from_state, to_state, reason, actor, reasons, drained_by, "
      "drain_reason) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) return insert.status();
  // Reasons never hold a newline (the head clips and the machine writes one line each).
  return insert->RunWith(absl::StrCat("recording a health transition of ", e.node, "/", e.gpu), e.t_s, e.node, e.gpu,
                         e.from_state, e.to_state, e.reason, e.actor, absl::StrJoin(e.reasons, "\n"), e.drained_by,
                         e.drain_reason);
}

}  // namespace gpupool::runtime
