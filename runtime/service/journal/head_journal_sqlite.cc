#include "runtime/service/journal/head_journal_sqlite.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime::sqlite {
namespace {

const char* PrimaryCodeName(int rc) {
  switch (rc & 0xff) {
    case SQLITE_ERROR: return "SQLITE_ERROR";
    case SQLITE_PERM: return "SQLITE_PERM";
    case SQLITE_BUSY: return "SQLITE_BUSY";
    case SQLITE_LOCKED: return "SQLITE_LOCKED";
    case SQLITE_NOMEM: return "SQLITE_NOMEM";
    case SQLITE_READONLY: return "SQLITE_READONLY";
    case SQLITE_IOERR: return "SQLITE_IOERR";
    case SQLITE_CORRUPT: return "SQLITE_CORRUPT";
    case SQLITE_FULL: return "SQLITE_FULL";
    case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN";
    case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT";
    case SQLITE_MISUSE: return "SQLITE_MISUSE";
    case SQLITE_RANGE: return "SQLITE_RANGE";
    case SQLITE_NOTADB: return "SQLITE_NOTADB";
    default: return "SQLITE_?";
  }
}

// The code says what the caller can do: wait and retry, free space, fix or restore the file, or
// nothing (our SQL is wrong: a bug).
absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

// ---- Statement ----

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), bind_rc_(other.bind_rc_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    bind_rc_ = other.bind_rc_;
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::NoteBind(int rc) {
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
}

// SQLITE_TRANSIENT: SQLite copies the bytes, so the caller's strings may die before Step. The copy
// costs nothing next to the commit's fsync.
Statement& Statement::BindText(int index, absl::string_view text) {
  NoteBind(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT,
                               SQLITE_UTF8));
  return *this;
}

Statement& Statement::BindBlob(int index, absl::string_view bytes) {
  // A zero-length blob, not NULL, for empty bytes: data() of an empty view may be null.
  NoteBind(bytes.empty() ? sqlite3_bind_zeroblob(stmt_, index, 0)
                         : sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(),
                                               SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::BindDouble(int index, double value) {
  NoteBind(sqlite3_bind_double(stmt_, index, value));
  return *this;
}

Statement& Statement::BindInt(int index, int64_t value) {
  NoteBind(sqlite3_bind_int64(stmt_, index, value));
  return *this;
}

absl::StatusOr<bool> Statement::Step(absl::string_view what) {
  if (bind_rc_ != SQLITE_OK) return db_->Error(bind_rc_, what);
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return db_->Error(rc, what);
}

absl::Status Statement::Run(absl::string_view what) {
  absl::StatusOr<bool> row;
  do {
    row = Step(what);
  } while (row.ok() && *row);
  Reset();
  return row.status();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_rc_ = SQLITE_OK;
}

std::string Statement::Text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  return p == nullptr ? std::string()
                      : std::string(reinterpret_cast<const char*>(p),
                                    static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::string Statement::Blob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  return p == nullptr ? std::string()
                      : std::string(static_cast<const char*>(p),
                                    static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

double Statement::Double(int column) const { return sqlite3_column_double(stmt_, column); }

int64_t Statement::Int(int column) const { return sqlite3_column_int64(stmt_, column); }

// ---- Db ----

absl::StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path, bool read_only) {
  // NOMUTEX: each connection is confined to one thread or one lock by its owner (see header).
  int flags = SQLITE_OPEN_NOMUTEX |
              (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite3* handle = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &handle, flags, nullptr);
  // Even a failed open usually hands back a handle, which carries the message and must be closed.
  std::unique_ptr<Db> db(new Db(path, handle));
  if (rc != SQLITE_OK) return db->Error(rc, read_only ? "opening for reading" : "opening");
  sqlite3_extended_result_codes(handle, 1);
  return db;
}

Db::~Db() { sqlite3_close_v2(handle_); }

absl::Status Db::Exec(const std::string& sql, absl::string_view what) {
  int rc = sqlite3_exec(handle_, sql.c_str(), nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : Error(rc, what);
}

absl::StatusOr<Statement> Db::Prepare(absl::string_view sql) const {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(handle_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("preparing \"", sql, "\""));
  return Statement(this, stmt);
}

absl::StatusOr<std::string> Db::QueryText(const std::string& sql, absl::string_view what) const {
  absl::StatusOr<Statement> st = Prepare(sql);
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Step(what);
  if (!row.ok()) return row.status();
  return *row ? st->Text(0) : std::string();
}

absl::Status Db::Error(int rc, absl::string_view what) const {
  // The connection's message is the specific one ("UNIQUE constraint failed: leases.lease_id")
  // when it belongs to this failure; otherwise SQLite's generic text for the code.
  const char* message = (handle_ != nullptr && sqlite3_extended_errcode(handle_) == rc)
                            ? sqlite3_errmsg(handle_)
                            : sqlite3_errstr(rc);
  return absl::Status(CodeFor(rc), absl::StrCat("head journal ", path_, ": ", what, ": ", message,
                                                " (", PrimaryCodeName(rc), ")"));
}

}  // namespace gpupool::runtime::sqlite
