#include "runtime/service/journal/head_journal_schema.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

// NOT NULL everywhere: an absent value is the empty string or 0, as in the record structs.
constexpr char kCreateV1[] = R"sql(
BEGIN IMMEDIATE;
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE jobs(
  job_id TEXT PRIMARY KEY, team TEXT NOT NULL, project TEXT NOT NULL,
  connected_s REAL NOT NULL, last_seen_s REAL NOT NULL);
CREATE TABLE nodes(
  node TEXT PRIMARY KEY, agent_address TEXT NOT NULL, inventory BLOB NOT NULL,
  last_heartbeat_s REAL NOT NULL);
CREATE TABLE requests(
  seq INTEGER PRIMARY KEY, request_id TEXT NOT NULL UNIQUE, job_id TEXT NOT NULL,
  team TEXT NOT NULL, request BLOB NOT NULL, submitted_s REAL NOT NULL);
CREATE TABLE leases(
  lease_id TEXT PRIMARY KEY, request_id TEXT NOT NULL, job_id TEXT NOT NULL, node TEXT NOT NULL,
  team TEXT NOT NULL, project TEXT NOT NULL, workload_class TEXT NOT NULL,
  priority_class TEXT NOT NULL, gpu_model TEXT NOT NULL, gpus REAL NOT NULL,
  lease BLOB NOT NULL, granted_s REAL NOT NULL);
CREATE TABLE ledger(
  seq INTEGER PRIMARY KEY, lease_id TEXT NOT NULL,
  team TEXT NOT NULL, project TEXT NOT NULL, workload_class TEXT NOT NULL,
  priority_class TEXT NOT NULL, gpu_model TEXT NOT NULL, gpus REAL NOT NULL,
  start_s REAL NOT NULL, end_s REAL NOT NULL, end_cause TEXT NOT NULL);
CREATE INDEX ledger_by_end ON ledger(end_s);
CREATE TABLE checkpoints(
  task_key TEXT NOT NULL, version INTEGER NOT NULL, job_id TEXT NOT NULL, path TEXT NOT NULL,
  step INTEGER NOT NULL, committed_s REAL NOT NULL,
  PRIMARY KEY(task_key, version)) WITHOUT ROWID;
INSERT INTO meta VALUES('schema_version', '1');
COMMIT;
)sql";

}  // namespace

absl::Status EnsureJournalSchema(sqlite::Db& db) {
  // The first read of the file: a non-database fails here with SQLITE_NOTADB.
  absl::StatusOr<std::string> tables =
      db.QueryText("SELECT count(*) FROM sqlite_master", "reading the schema");
  if (!tables.ok()) return tables.status();
  absl::StatusOr<std::string> has_meta = db.QueryText(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
      "reading the schema");
  if (!has_meta.ok()) return has_meta.status();

  if (*has_meta == "0") {
    if (*tables != "0") {
      return absl::FailedPreconditionError(absl::StrCat(
          "head journal ", db.path(),
          ": an SQLite database that is not a head journal (it has tables but no meta table); "
          "refusing to write into it"));
    }
    if (absl::Status st = db.Exec(kCreateV1, "creating the schema"); !st.ok()) {
      (void)db.Exec("ROLLBACK", "rolling back the schema");
      return st;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> version = db.QueryText(
      "SELECT value FROM meta WHERE key = 'schema_version'", "reading the schema version");
  if (!version.ok()) return version.status();
  int found = 0;
  if (!absl::SimpleAtoi(*version, &found)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "head journal ", db.path(), ": unknown schema version '", *version,
        "'; this gpupool reads schema version ", kJournalSchemaVersion));
  }
  if (found != kJournalSchemaVersion) {
    // There are no older versions yet; when there are, migrate them here.
    return absl::FailedPreconditionError(absl::StrCat(
        "head journal ", db.path(), ": schema version ", found, ", but this gpupool reads schema "
        "version ", kJournalSchemaVersion,
        found > kJournalSchemaVersion ? " (written by a newer gpupool: run that one)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace gpupool::runtime
