#include "runtime/service/journal/head_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/service/journal/head_journal_reader.h"
#include "runtime/service/journal/head_journal_writer.h"

namespace gpupool::runtime {
namespace {

// Takes PATH-lock exclusively (flock: released by the kernel when the process dies, so a head
// killed with -9 leaves no stale lock). Returns the descriptor that holds it.
absl::StatusOr<int> LockJournal(const std::string& path) {
  std::string lock_path = path + "-lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "head journal ", path, ": cannot open its lock file ", lock_path, ": ", strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "head journal ", path, " is in use by another head (", lock_path,
          " is locked): one head per journal"));
    }
    return absl::FailedPreconditionError(absl::StrCat("head journal ", path, ": cannot lock ",
                                                      lock_path, ": ", strerror(err)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HeadJournal>> HeadJournal::Open(const std::string& path,
                                                               const JournalOptions& options) {
  absl::StatusOr<int> lock_fd = LockJournal(path);
  if (!lock_fd.ok()) return lock_fd.status();
  absl::StatusOr<std::unique_ptr<JournalWriter>> writer =
      JournalWriter::Open(path, options.sync == JournalSync::kFull);
  absl::StatusOr<std::unique_ptr<JournalReader>> reader =
      writer.ok() ? JournalReader::Open(path) : writer.status();
  if (!reader.ok()) {
    writer = nullptr;  // close the database before giving up the lock
    ::close(*lock_fd);
    return reader.status();
  }
  return std::unique_ptr<HeadJournal>(
      new HeadJournal(path, options, *lock_fd, *std::move(writer), *std::move(reader)));
}

HeadJournal::HeadJournal(std::string path, const JournalOptions& options, int lock_fd,
                         std::unique_ptr<JournalWriter> writer,
                         std::unique_ptr<JournalReader> reader)
    : path_(std::move(path)),
      options_(options),
      lock_fd_(lock_fd),
      writer_(std::move(writer)),
      reader_(std::move(reader)) {
  thread_ = std::thread([this] { Loop(); });
}

HeadJournal::~HeadJournal() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  // Close the database before giving up the lock, so that the next head finds it closed; the
  // writer last, so that as the last connection it checkpoints and removes the WAL.
  reader_.reset();
  writer_.reset();
  ::close(lock_fd_);
}

// ---- Mutations ----

JournalTicket HeadJournal::Enqueue(JournalOp op) {
  absl::MutexLock lock(&mu_);
  if (queue_.empty()) queue_started_ = std::chrono::steady_clock::now();
  queue_.push_back(std::move(op));
  return ++issued_;
}

JournalTicket HeadJournal::RecordJob(JobRecord job) { return Enqueue(std::move(job)); }

JournalTicket HeadJournal::RemoveJob(std::string job_id) {
  return Enqueue(JobRemoval{std::move(job_id)});
}

JournalTicket HeadJournal::RecordNode(NodeRecord node) { return Enqueue(std::move(node)); }

JournalTicket HeadJournal::RemoveNode(std::string node) {
  return Enqueue(NodeRemoval{std::move(node)});
}

JournalTicket HeadJournal::RecordRequest(RequestRecord request) {
  return Enqueue(std::move(request));
}

JournalTicket HeadJournal::RemoveRequest(std::string request_id) {
  return Enqueue(RequestRemoval{std::move(request_id)});
}

JournalTicket HeadJournal::RecordLease(LeaseRecord lease) { return Enqueue(std::move(lease)); }

JournalTicket HeadJournal::CloseLease(std::string lease_id, double end_s, std::string cause, double busy_gpu_s) {
  return Enqueue(LeaseClosing{std::move(lease_id), end_s, std::move(cause), busy_gpu_s});
}

JournalTicket HeadJournal::RecordCheckpoint(CheckpointRecord checkpoint) {
  return Enqueue(std::move(checkpoint));
}

JournalTicket HeadJournal::RemoveCheckpoints(std::string task_key) {
  return Enqueue(CheckpointRemoval{std::move(task_key)});
}

JournalTicket HeadJournal::RecordHistory(std::vector<HistoryRow> rows, double keep_after_s) {
  return Enqueue(HistorySample{std::move(rows), keep_after_s});
}

// ---- Durability ----

absl::Status HeadJournal::WaitDurable(JournalTicket ticket) {
  if (std::this_thread::get_id() == thread_.get_id()) {  // a bug: refuse rather than hang
    return absl::FailedPreconditionError(absl::StrCat(
        "head journal ", path_, ": WaitDurable on the journal thread (in an OnDurable callback) "
        "would wait for itself"));
  }
  absl::MutexLock lock(&mu_);
  if (ticket > issued_) {
    return absl::InvalidArgumentError(absl::StrCat("head journal ", path_, ": ticket ", ticket,
                                                   " was never issued (last: ", issued_, ")"));
  }
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return durable_ >= ticket || !failure_.ok();
  };
  mu_.Await(absl::Condition(&settled));
  return durable_ >= ticket ? absl::OkStatus() : failure_;
}

void HeadJournal::OnDurable(JournalTicket ticket, DurableCallback done) {
  absl::MutexLock lock(&mu_);
  if (ticket > issued_) {
    // A bug in the caller: settle at once (key 0 is always durable) with the error.
    absl::Status error = absl::InvalidArgumentError(absl::StrCat(
        "head journal ", path_, ": ticket ", ticket, " was never issued (last: ", issued_, ")"));
    callbacks_.emplace(0, [done = std::move(done), error](const absl::Status&) { done(error); });
    return;
  }
  callbacks_.emplace(ticket, std::move(done));
}

absl::Status HeadJournal::Flush() {
  JournalTicket last;
  {
    absl::MutexLock lock(&mu_);
    last = issued_;
  }
  return WaitDurable(last);
}

// ---- The journal thread ----

bool HeadJournal::HasWorkLocked() const {
  if (stop_ || !queue_.empty()) return true;
  return !callbacks_.empty() && (callbacks_.begin()->first <= durable_ || !failure_.ok());
}

bool HeadJournal::BatchFullLocked() const {
  return stop_ || queue_.size() >= std::min(options_.max_batch_records, batch_target_);
}

void HeadJournal::RunSettledCallbacks() {
  std::vector<std::pair<DurableCallback, absl::Status>> settled;
  while (!callbacks_.empty()) {
    auto it = callbacks_.begin();
    if (it->first <= durable_) {
      settled.emplace_back(std::move(it->second), absl::OkStatus());
    } else if (!failure_.ok()) {
      settled.emplace_back(std::move(it->second), failure_);
    } else {
      break;
    }
    callbacks_.erase(it);
  }
  if (settled.empty()) return;
  mu_.Unlock();
  for (auto& [done, status] : settled) done(std::move(status));
  mu_.Lock();
}

void HeadJournal::Loop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(this, &HeadJournal::HasWorkLocked));
    RunSettledCallbacks();
    if (queue_.empty()) {
      // With nothing queued every ticket is settled, so no callback is left behind; but more may
      // have been registered while the last ones ran.
      if (stop_ && callbacks_.empty()) return;
      continue;
    }
    // Let the batch collect records for the rest of its window, unless it is full or stopping.
    auto left = options_.group_commit_window -
                (std::chrono::steady_clock::now() - queue_started_);
    if (left > std::chrono::steady_clock::duration::zero()) {
      mu_.AwaitWithTimeout(absl::Condition(this, &HeadJournal::BatchFullLocked),
                           absl::FromChrono(left));
    }
    std::vector<JournalOp> batch;
    batch.swap(queue_);
    batch_target_ = batch.size();
    const JournalTicket last = issued_;
    const bool failed = !failure_.ok();  // after a failure nothing more is written
    mu_.Unlock();
    absl::Status status = failed ? absl::OkStatus() : writer_->Commit(batch);
    batch.clear();
    mu_.Lock();
    if (failed) continue;
    if (status.ok()) {
      durable_ = last;
    } else {
      failure_ = std::move(status);
    }
  }
}

// ---- Reads ----

absl::StatusOr<HeadState> HeadJournal::Load() { return reader_->Load(); }

absl::StatusOr<std::vector<UsageRow>> HeadJournal::Usage(double from_s, double to_s,
                                                         UsageGroup group_by) {
  return reader_->Usage(from_s, to_s, group_by);
}

JournalTicket HeadJournal::RecordHealthEvent(HealthEventRow event) { return Enqueue(std::move(event)); }

absl::StatusOr<std::vector<HealthEventRow>> HeadJournal::HealthEvents(double from_s, double to_s) {
  return reader_->HealthEvents(from_s, to_s);
}

absl::StatusOr<std::vector<HistoryRow>> HeadJournal::History(double from_s, double to_s) {
  return reader_->History(from_s, to_s);
}

absl::StatusOr<std::vector<HistoryRow>> HeadJournal::PoolWideHistory(double from_s, double to_s) {
  return reader_->PoolWideHistory(from_s, to_s);
}

absl::StatusOr<std::vector<UsageCell>> HeadJournal::UsageCells(double from_s, double to_s) {
  return reader_->UsageCells(from_s, to_s);
}

absl::StatusOr<std::vector<LedgerEntry>> HeadJournal::Ledger(double from_s, double to_s) {
  return reader_->Ledger(from_s, to_s);
}

absl::StatusOr<std::vector<CheckpointRecord>> HeadJournal::CheckpointHistory(
    const std::string& task_key) {
  return reader_->CheckpointHistory(task_key);
}

absl::Status HeadJournal::CheckIntegrity() { return reader_->CheckIntegrity(); }

}  // namespace gpupool::runtime
