#include "runtime/service/journal/head_journal_schema.h"

#include <iterator>
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

// Migrations, numbered by the version they produce: kMigrations[i] upgrades version i + 1 to
// i + 2, in place and in one transaction with the version it writes. A new journal is created at
// version 1 and migrated like an old one, so there is one way to each version. Append only:
// a released migration never changes.
constexpr const char* kMigrations[] = {
    // 2: the pool's history (pool-wide and per-team aggregates sampled every minute).
    R"sql(
BEGIN IMMEDIATE;
CREATE TABLE history(
  seq INTEGER PRIMARY KEY, t_s REAL NOT NULL, scope TEXT NOT NULL, allocated_gpus REAL NOT NULL,
  capacity_gpus REAL NOT NULL, borrowed_gpus REAL NOT NULL, pending INTEGER NOT NULL);
CREATE INDEX history_by_time ON history(t_s);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
COMMIT;
)sql",
    // 3: every transition of a GPU's health, with its reason and who made it (issue 24).
    R"sql(
BEGIN IMMEDIATE;
CREATE TABLE health_events(
  seq INTEGER PRIMARY KEY, t_s REAL NOT NULL, node TEXT NOT NULL, gpu INTEGER NOT NULL,
  from_state TEXT NOT NULL, to_state TEXT NOT NULL, reason TEXT NOT NULL, actor TEXT NOT NULL,
  reasons TEXT NOT NULL, drained_by TEXT NOT NULL, drain_reason TEXT NOT NULL);
CREATE INDEX health_events_by_time ON health_events(t_s);
UPDATE meta SET value = '3' WHERE key = 'schema_version';
COMMIT;
)sql",
    // 4: the job each closed lease served (usage --by job; rows closed before it keep '') and how
    // long the job said its tasks kept it busy (pool seconds x GPUs; -1: not said).
    R"sql(
BEGIN IMMEDIATE;
ALTER TABLE ledger ADD COLUMN job TEXT NOT NULL DEFAULT '';
ALTER TABLE ledger ADD COLUMN busy_gpu_s REAL NOT NULL DEFAULT -1;
UPDATE meta SET value = '4' WHERE key = 'schema_version';
COMMIT;
)sql",
};
static_assert(std::size(kMigrations) + 1 == kJournalSchemaVersion, "one migration per version after the first");

absl::Status Migrate(sqlite::Db& db, int from_version) {
  for (int v = from_version; v < kJournalSchemaVersion; ++v) {
    if (absl::Status st = db.Exec(kMigrations[v - 1], absl::StrCat("migrating the schema to version ", v + 1));
        !st.ok()) {
      (void)db.Exec("ROLLBACK", "rolling back the migration");
      return st;
    }
  }
  return absl::OkStatus();
}

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
    return Migrate(db, 1);
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
  if (found >= 1 && found < kJournalSchemaVersion) return Migrate(db, found);
  if (found != kJournalSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "head journal ", db.path(), ": schema version ", found, ", but this gpupool reads schema "
        "version ", kJournalSchemaVersion,
        found > kJournalSchemaVersion ? " (written by a newer gpupool: run that one)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace gpupool::runtime
