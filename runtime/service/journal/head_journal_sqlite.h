// File: runtime/service/journal/head_journal_sqlite.h
//
// The little of SQLite's C API the head journal uses, behind two owning types whose errors name
// the database file and SQLite's own message, so that every failure reads like
//   head journal /var/lib/gpupool/head.db: recording lease L7: database or disk is full (SQLITE_FULL)
//
//   absl::StatusOr<std::unique_ptr<sqlite::Db>> db = sqlite::Db::Open(path, /*read_only=*/false);
//   absl::StatusOr<sqlite::Statement> st = (*db)->Prepare("SELECT team FROM jobs WHERE job_id = ?");
//   st->BindText(1, "job-1");
//   while (*st->Step()) Use(st->Text(0));
//
// Thread-safety: none. A Db and its Statements are used by one thread at a time (the journal
// opens its connections with SQLITE_OPEN_NOMUTEX and keeps each behind its own thread or lock).
// Internal to runtime/service/journal/head_journal*: not a general SQLite wrapper.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_SQLITE_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_SQLITE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gpupool::runtime::sqlite {

class Db;

// Bytes to bind as a BLOB (a plain string binds as TEXT).
struct Bytes {
  absl::string_view bytes;
};

// A prepared statement. Binds are 1-based, columns 0-based (SQLite's convention). A bind error
// (only a bug can cause one: an index out of range) is kept and returned by the next Step.
class Statement {
 public:
  Statement() = default;  // empty: assign a prepared one before use
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  ~Statement();

  Statement& BindText(int index, absl::string_view text);
  Statement& BindBlob(int index, absl::string_view bytes);
  Statement& BindDouble(int index, double value);
  Statement& BindInt(int index, int64_t value);

  // Binds `values` to ?1, ?2, ... by their types (text, Bytes, double, int64_t), then Run: one
  // write in one line.
  template <typename... Values>
  absl::Status RunWith(absl::string_view what, const Values&... values) {
    int index = 0;
    (Bind(++index, values), ...);
    return Run(what);
  }

  // Advances: true when a row is ready, false when the statement is done. `what` names the
  // operation in the error ("loading leases").
  absl::StatusOr<bool> Step(absl::string_view what);
  // Steps to the end (a write), then Reset.
  absl::Status Run(absl::string_view what);
  // Ready to run again, bindings cleared.
  void Reset();

  std::string Text(int column) const;
  std::string Blob(int column) const;
  double Double(int column) const;
  int64_t Int(int column) const;

 private:
  friend class Db;
  Statement(const Db* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  void Bind(int index, absl::string_view text) { BindText(index, text); }
  void Bind(int index, const std::string& text) { BindText(index, text); }
  void Bind(int index, Bytes bytes) { BindBlob(index, bytes.bytes); }
  void Bind(int index, double value) { BindDouble(index, value); }
  void Bind(int index, int64_t value) { BindInt(index, value); }
  void NoteBind(int rc);

  const Db* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  int bind_rc_ = 0;  // SQLITE_OK, or the first failed bind's code
};

class Db {
 public:
  // Opens the database at `path`; read-write (creating it when absent) or read-only. SQLite reads
  // nothing yet, so a file that is not a database fails on the first statement, not here.
  static absl::StatusOr<std::unique_ptr<Db>> Open(const std::string& path, bool read_only);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs one or more statements that return no rows the caller needs.
  absl::Status Exec(const std::string& sql, absl::string_view what);
  absl::StatusOr<Statement> Prepare(absl::string_view sql) const;
  // The first column of the first row of `sql` as text; empty when no row.
  absl::StatusOr<std::string> QueryText(const std::string& sql, absl::string_view what) const;

  // "head journal PATH: WHAT: SQLite's message (SQLITE_CODE)", with a status code chosen by what
  // the caller can do about `rc`.
  absl::Status Error(int rc, absl::string_view what) const;
  const std::string& path() const { return path_; }

 private:
  Db(std::string path, sqlite3* handle) : path_(std::move(path)), handle_(handle) {}

  const std::string path_;
  sqlite3* const handle_;
};

}  // namespace gpupool::runtime::sqlite

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_SQLITE_H_
