// File: runtime/service/journal/head_journal.h
//
// The head's durable journal (DESIGN §3, issue 6 "Head durability"): what the pool service must
// never lose — connected jobs, agents, queued requests, live leases, the accounting ledger and the
// checkpoint index — in one SQLite database in WAL mode, so that a head killed with `kill -9`
// restarts with every fact it acknowledged.
//
//   absl::StatusOr<std::unique_ptr<HeadJournal>> journal = HeadJournal::Open(path);
//   HeadState state = *(*journal)->Load();                // on restart: rebuild the pool from it
//   ...
//   JournalTicket t = (*journal)->RecordLease(lease);     // cheap: queued into the current batch
//   (*journal)->OnDurable(t, [reply](absl::Status st) {  // ...then acknowledge the client
//     st.ok() ? reply.Grant() : reply.Fail(st);
//   });
//
// Group commit. Mutations do not touch the disk: each is appended to the current batch under a
// mutex and gets a ticket (a sequence number). The journal thread writes a whole batch in ONE
// transaction, so one WAL fsync covers every record in it, and throughput is bounded by the fsync
// rate, not the record rate. Records that arrive while a commit runs form the next batch. Before
// committing it, the thread waits until the batch is as large as the previous one, but never
// longer than `group_commit_window` after its first record. Why: K clients that each wait for
// their record are woken together after a commit and re-record one by one; committing the first
// arrival at once would split them over two fsyncs. A lone record (previous batch: 1) waits for
// nothing, and when the load drops, one batch pays the window and the target follows it down.
//
// Durability contract. A ticket is durable once its batch's COMMIT returned; tickets become
// durable in order (a durable ticket implies every smaller one is). Acknowledge a fact to a
// client or agent only after its ticket is durable — WaitDurable or OnDurable.
//   - process crash (kill -9, abort): nothing durable is lost, with either sync mode;
//   - power loss or kernel crash, sync = kFull (the default): nothing durable is lost (the WAL is
//     fsynced before COMMIT returns), assuming the disk honours flushes;
//   - power loss, sync = kNormal: the database stays consistent, but the commits since the last
//     WAL checkpoint (up to ~1000 pages of WAL, i.e. seconds to minutes of history) may roll back,
//     although they were acknowledged.
// Records queued but not yet durable are lost by any crash; their clients were never told yes.
// kFull is the default because the head acknowledges grants and releases that agents and jobs act
// on; bench/journal shows what it costs (group commit makes the per-record cost small).
//
// Each mutation is atomic: RecordLease also removes the request it grants, CloseLease moves the
// lease into the ledger. Two calls may land in different transactions, but always in call order.
// Mutations are idempotent (records replace by key; removing or closing what is absent does
// nothing), so a head replaying its decisions after a restart cannot corrupt the journal.
//
// Failure. If a commit fails (disk full, I/O error), the batch is rolled back, its tickets and
// every later one fail with that error, and the journal writes nothing more: the head's memory
// and its journal have diverged, so it should stop and restart from the journal, which still
// holds everything acknowledged before.
//
// One head per journal: Open takes an exclusive lock on PATH-lock (flock, released when the
// process dies), and a second Open of the same file fails until the first is closed.
//
// Threads. Every method is thread-safe. Mutations only take a mutex. WaitDurable blocks the
// caller. OnDurable callbacks and all SQLite writes run on the journal thread; callbacks must be
// short and must not call WaitDurable (they would wait on their own thread). Reads (Load, Usage,
// ...) run on the caller's thread on a second, read-only connection and see what is committed,
// not what is queued: Flush first to read your own writes.
#ifndef GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_H_
#define GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/service/journal/head_journal_ops.h"
#include "runtime/service/journal/head_journal_records.h"

namespace gpupool::runtime {

class JournalWriter;
class JournalReader;

enum class JournalSync {
  kFull,    // fsync the WAL at every commit: acknowledged facts survive a power loss
  kNormal,  // fsync only at WAL checkpoints: survives a process crash, not a power loss
};

struct JournalOptions {
  // The longest a batch waits, after its first record, to become as large as the previous
  // batch. 0: commit as soon as the journal thread is free.
  std::chrono::microseconds group_commit_window{2000};
  // A batch this large commits without waiting, whatever the previous one was.
  size_t max_batch_records = 4096;
  JournalSync sync = JournalSync::kFull;
};

// A mutation's place in the journal's order; 0 is never issued (and always durable).
using JournalTicket = uint64_t;
using DurableCallback = std::function<void(absl::Status)>;

class HeadJournal {
 public:
  // Opens or creates the journal at `path` and starts the journal thread. Errors name the path:
  // FailedPrecondition when another process holds it, for another schema version (both versions
  // named) or an SQLite file that is not a journal; DataLoss for a file that is not a database.
  static absl::StatusOr<std::unique_ptr<HeadJournal>> Open(const std::string& path,
                                                           const JournalOptions& options = {});
  // Commits what is queued (running its callbacks), stops the thread, releases the lock.
  ~HeadJournal();

  // ---- Mutations: queue into the current batch; never block on the disk. ----
  JournalTicket RecordJob(JobRecord job);  // also for moving last_seen_s
  JournalTicket RemoveJob(std::string job_id);
  JournalTicket RecordNode(NodeRecord node);
  JournalTicket RemoveNode(std::string node);
  JournalTicket RecordRequest(RequestRecord request);  // keeps its queue place if recorded again
  JournalTicket RemoveRequest(std::string request_id);  // withdrawn (a grant removes it itself)
  // The grant: records the lease and removes its request (lease.request_id), atomically.
  JournalTicket RecordLease(LeaseRecord lease);
  // Released, revoked or lost: moves the lease into the ledger as [granted_s, end_s), atomically.
  // `busy_gpu_s`: how long the job's tasks ran on it (seconds x GPUs), negative when unknown; capped
  // at what the lease held (end_s - granted_s) x gpus.
  JournalTicket CloseLease(std::string lease_id, double end_s, std::string cause, double busy_gpu_s = -1);
  JournalTicket RecordCheckpoint(CheckpointRecord checkpoint);
  JournalTicket RemoveCheckpoints(std::string task_key);  // the task is done: all its versions
  // A sample of the pool's history; rows older than `keep_after_s` are dropped with it.
  JournalTicket RecordHistory(std::vector<HistoryRow> rows, double keep_after_s);
  // A GPU's health transition (kept for good: it is the GPU's service record).
  JournalTicket RecordHealthEvent(HealthEventRow event);

  // ---- Durability. ----
  // Blocks until `ticket` is durable (OK) or its batch failed (the commit's error).
  // InvalidArgument for a ticket never issued; FailedPrecondition on the journal thread.
  absl::Status WaitDurable(JournalTicket ticket);
  // Calls `done` on the journal thread once `ticket` is durable or failed, with the same status
  // WaitDurable would return. Also when it already is: `done` never runs on the caller's thread.
  void OnDurable(JournalTicket ticket, DurableCallback done);
  // WaitDurable for every mutation queued so far.
  absl::Status Flush();

  // ---- Reads of the committed state. ----
  absl::StatusOr<HeadState> Load();
  // GPU-hours per group over [from_s, to_s): each lease's interval clipped to the period and
  // weighted by its `gpus`. Live leases count as running until `to_s`, so pass `to_s` <= now.
  // InvalidArgument when from_s >= to_s.
  absl::StatusOr<std::vector<UsageRow>> Usage(double from_s, double to_s, UsageGroup group_by);
  // As Usage, grouped by every accounting column at once (team, project, workload class, priority
  // class, GPU model, job), ordered by them: what chargeback regroups and prices.
  absl::StatusOr<std::vector<UsageCell>> UsageCells(double from_s, double to_s);
  // History rows with t_s in [from_s, to_s), by time then scope.
  absl::StatusOr<std::vector<HistoryRow>> History(double from_s, double to_s);
  // As History, the pool-wide rows only (scope "pool" and the per-model "model:<name>"; no team's):
  // what chargeback's `unavailable` reads.
  absl::StatusOr<std::vector<HistoryRow>> PoolWideHistory(double from_s, double to_s);
  // Health transitions with t_s in [from_s, to_s), in the order they were recorded.
  absl::StatusOr<std::vector<HealthEventRow>> HealthEvents(double from_s, double to_s);
  // Ledger entries that overlap [from_s, to_s), by end time.
  absl::StatusOr<std::vector<LedgerEntry>> Ledger(double from_s, double to_s);
  // Every version recorded for `task_key`, oldest first (Load has only the newest).
  absl::StatusOr<std::vector<CheckpointRecord>> CheckpointHistory(const std::string& task_key);
  // SQLite's integrity_check over the whole file: DataLoss naming the problems. Slow on a large
  // journal (reads every page): for operators and tests, not for every start.
  absl::Status CheckIntegrity();

  const std::string& path() const { return path_; }

 private:
  HeadJournal(std::string path, const JournalOptions& options, int lock_fd,
              std::unique_ptr<JournalWriter> writer, std::unique_ptr<JournalReader> reader);
  JournalTicket Enqueue(JournalOp op);
  void Loop();
  // Runs the callbacks whose tickets are settled (durable or failed), releasing mu_ meanwhile.
  void RunSettledCallbacks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Conditions the journal thread waits for.
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool BatchFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after Open.
  const std::string path_;
  const JournalOptions options_;
  const int lock_fd_;                            // holds the flock on PATH-lock
  std::unique_ptr<JournalWriter> writer_;  // used on the journal thread only
  std::unique_ptr<JournalReader> reader_;  // locks itself

  mutable absl::Mutex mu_;
  std::vector<JournalOp> queue_ ABSL_GUARDED_BY(mu_);  // the current batch
  std::chrono::steady_clock::time_point queue_started_ ABSL_GUARDED_BY(mu_);
  JournalTicket issued_ ABSL_GUARDED_BY(mu_) = 0;   // the last ticket handed out
  JournalTicket durable_ ABSL_GUARDED_BY(mu_) = 0;  // every ticket <= durable_ is committed
  absl::Status failure_ ABSL_GUARDED_BY(mu_);       // sticky: tickets > durable_ fail with it
  std::multimap<JournalTicket, DurableCallback> callbacks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The size of the last batch: a batch waits out the window only while it is smaller.
  size_t batch_target_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread thread_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_JOURNAL_HEAD_JOURNAL_H_
