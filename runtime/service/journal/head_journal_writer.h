// File: runtime/service/journal/head_journal_writer.h
//
// The head journal's write connection: applies a batch of queued mutations in one SQLite
// transaction (BEGIN IMMEDIATE ... COMMIT), with every statement prepared once at Open. With
// synchronous=FULL the COMMIT returns only after the WAL is fsynced, so a committed batch
// survives a power loss; with NORMAL it survives a process crash only (see head_journal.h).
//
// Thread-safety: none; HeadJournal calls Commit from its journal thread only. Internal.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_WRITER_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_WRITER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/service/journal/head_journal_ops.h"
#include "runtime/service/journal/head_journal_sqlite.h"

namespace gpupool::runtime {

class JournalWriter {
 public:
  // Opens (creating) the database in WAL mode with the given synchronous setting and checks or
  // creates its schema (head_journal_schema.h).
  static absl::StatusOr<std::unique_ptr<JournalWriter>> Open(const std::string& path,
                                                             bool full_sync);
  ~JournalWriter();

  // All of `batch` in one transaction, in order; on any error nothing of it is applied.
  absl::Status Commit(const std::vector<JournalOp>& batch);

 private:
  struct Statements;
  JournalWriter(std::unique_ptr<sqlite::Db> db, std::unique_ptr<Statements> statements);

  absl::Status Apply(const JobRecord& job);
  absl::Status Apply(const JobRemoval& removal);
  absl::Status Apply(const NodeRecord& node);
  absl::Status Apply(const NodeRemoval& removal);
  absl::Status Apply(const RequestRecord& request);
  absl::Status Apply(const RequestRemoval& removal);
  absl::Status Apply(const LeaseRecord& lease);     // also removes the request it grants
  absl::Status Apply(const LeaseClosing& closing);  // moves the lease into the ledger
  absl::Status Apply(const CheckpointRecord& checkpoint);
  absl::Status Apply(const CheckpointRemoval& removal);
  absl::Status Apply(const HistorySample& sample);  // inserts its rows, drops those past retention
  absl::Status Apply(const HealthEventRow& event);   // appends it (kept: a GPU's record is its history)

  std::unique_ptr<sqlite::Db> db_;
  std::unique_ptr<Statements> s_;  // prepared on *db_, finalized before it closes
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_WRITER_H_
