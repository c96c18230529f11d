// File: runtime/service/journal/head_journal_reader.h
//
// The head journal's read connection (read-only, beside the writer's: WAL lets it read the last
// committed state while the journal thread writes the next batch). Each call reads one consistent
// snapshot.
//
// Thread-safety: thread-safe; calls are serialized on one connection. Internal: HeadJournal's
// read methods delegate here.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_READER_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/service/journal/head_journal_records.h"
#include "runtime/service/journal/head_journal_sqlite.h"

namespace gpupool::runtime {

class JournalReader {
 public:
  // Opens `path`, which JournalWriter::Open has already created and checked.
  static absl::StatusOr<std::unique_ptr<JournalReader>> Open(const std::string& path);

  absl::StatusOr<HeadState> Load();
  absl::StatusOr<std::vector<UsageRow>> Usage(double from_s, double to_s, UsageGroup group_by);
  absl::StatusOr<std::vector<UsageCell>> UsageCells(double from_s, double to_s);
  absl::StatusOr<std::vector<HistoryRow>> History(double from_s, double to_s);
  absl::StatusOr<std::vector<HistoryRow>> PoolWideHistory(double from_s, double to_s);
  absl::StatusOr<std::vector<HealthEventRow>> HealthEvents(double from_s, double to_s);
  absl::StatusOr<std::vector<LedgerEntry>> Ledger(double from_s, double to_s);
  absl::StatusOr<std::vector<CheckpointRecord>> CheckpointHistory(const std::string& task_key);
  absl::Status CheckIntegrity();

 private:
  explicit JournalReader(std::unique_ptr<sqlite::Db> db) : db_(std::move(db)) {}
  // History rows in [from_s, to_s) whose scope also satisfies `scopes` (an SQL "AND ..." or "").
  absl::StatusOr<std::vector<HistoryRow>> HistoryWhere(double from_s, double to_s, const char* scopes);

  absl::Mutex mu_;
  const std::unique_ptr<sqlite::Db> db_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_READER_H_
