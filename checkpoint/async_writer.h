// File: checkpoint/async_writer.h
//
// Snapshots written in the background, so a task pays only for a memcpy at its safe point
// (CheckFreq's split of a checkpoint into "snapshot" and "persist"):
//
//   AsyncSnapshotWriter writer(store.get(), {.staging_budget_bytes = 4ull << 30});
//   writer.Prewarm(state_bytes);                       // optional: fault the staging memory now
//   ...
//   // at ctx.Step(), when a checkpoint is due:
//   absl::StatusOr<SnapshotFuture> f = writer.Submit(task, step, metadata, {weights, optimizer});
//   if (!f.ok()) { /* not taken (budget full): still due, try again at the next safe point */ }
//   // on revocation: Submit with .wait_for_staging_until = grace deadline, then Flush(task).
//
// Submit copies the pieces into a pooled, pre-faulted staging buffer and returns; a writer thread
// commits it through SnapshotStore::Write. Per task:
//   - at most one write is in flight and at most one more is pending, never two writers;
//   - a Submit while one is pending (staged, not started) replaces it, reusing its buffer; the
//     replaced one's future gets Cancelled ("superseded"), since only the newest matters;
//   - snapshots commit in Submit order, so the newest version is always the latest step.
//
// When the staging budget is exhausted (other snapshots still being written), Submit waits for
// room until `wait_for_staging_until`, by default not at all, and then returns ResourceExhausted
// without taking the snapshot. Why: for a periodic checkpoint a late snapshot costs nothing but a
// little more work at risk, while stalling the training loop for a whole write (seconds for 1 GiB)
// costs exactly the overhead the async path exists to avoid; the runtime keeps the checkpoint due
// and retries at the next safe point. A preemption, which must have its snapshot, passes its grace
// deadline instead. A snapshot larger than the whole budget can never be staged: Submit writes it
// synchronously on the caller's thread (counted in stats), the one case where the caller waits.
//
// Completion: the returned future, and SubmitOptions::on_done (usually on the writer thread; keep
// it short). Shutdown (or the destructor) finishes every staged snapshot, or with a deadline
// cancels those not yet started and says which.
//
// Thread-safety: thread-safe. Concurrent Submits for the same task are refused (a task reaches a
// safe point on one thread); for different tasks they proceed in parallel. While a task uses the
// writer, write its snapshots only through it: a direct SnapshotStore::Write could be overtaken
// by a staged older one.
#ifndef GPUPOOL_CHECKPOINT_ASYNC_WRITER_H_
#define GPUPOOL_CHECKPOINT_ASYNC_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "checkpoint/snapshot_store.h"
#include "checkpoint/staging_pool.h"

namespace gpupool::checkpoint {

using SnapshotFuture = std::future<absl::StatusOr<SnapshotInfo>>;

struct AsyncWriterOptions {
  // Upper bound on staging memory (in use and idle). Two snapshots' worth per concurrently
  // checkpointing task lets one be written while the next is staged. 0 makes every Submit
  // synchronous.
  uint64_t staging_budget_bytes = 2ull << 30;
  // Background writer threads. One suits one disk; more help only when several tasks write to
  // storage that parallelises (a shared file system).
  int writer_threads = 1;
  // Nice value of the writer threads (0-19; higher yields more). The task's own threads should
  // win the CPU when the two compete: a snapshot landing a little later costs nothing, a slower
  // training step costs the overhead this writer exists to avoid. Kernel work done inside the
  // writer's write() calls is charged to it too; the kernel's own writeback threads are not.
  int writer_nice = 10;
};

struct SubmitOptions {
  // How long Submit may wait for staging room (see the file comment). InfinitePast: not at all.
  absl::Time wait_for_staging_until = absl::InfinitePast();
  // Called once with the outcome: on a writer thread after a background write; on the thread
  // that caused it for a synchronous write, a supersede (the newer Submit) or a cancellation
  // (Shutdown). Must not call Flush, FlushAll or Shutdown (they would wait for this callback).
  std::function<void(const absl::StatusOr<SnapshotInfo>&)> on_done;
};

struct AsyncWriterStats {
  uint64_t staged = 0;                // Submits accepted into staging
  uint64_t written = 0;               // committed (background and synchronous)
  uint64_t failed = 0;                // writes that returned an error
  uint64_t superseded = 0;            // replaced before they started
  uint64_t rejected_no_staging = 0;   // Submits refused because the budget stayed full
  uint64_t written_synchronously = 0; // larger than the whole budget
  uint64_t cancelled_at_shutdown = 0;
  uint64_t staging_bytes_reserved = 0;  // memory held by the pool now
};

class AsyncSnapshotWriter {
 public:
  // `store` must outlive the writer. Starts the writer threads.
  AsyncSnapshotWriter(SnapshotStore* store, AsyncWriterOptions options);
  // Shutdown(absl::InfiniteFuture()): every staged snapshot is written first.
  ~AsyncSnapshotWriter();
  AsyncSnapshotWriter(const AsyncSnapshotWriter&) = delete;
  AsyncSnapshotWriter& operator=(const AsyncSnapshotWriter&) = delete;

  // Allocates and faults an idle staging buffer of `bytes` now, so the first snapshot's copy runs
  // at memcpy speed. ResourceExhausted if it does not fit the budget.
  absl::Status Prewarm(uint64_t bytes);

  // Stages a snapshot (see the file comment). Errors, with nothing taken: InvalidArgument (bad key,
  // oversized metadata), ResourceExhausted (no staging room by the deadline), FailedPrecondition
  // (shut down, or a concurrent Submit for the same task). Write errors arrive in the future.
  absl::StatusOr<SnapshotFuture> Submit(absl::string_view task, int64_t step,
                                        absl::string_view metadata,
                                        std::span<const std::span<const std::byte>> pieces,
                                        SubmitOptions options = {});

  // Waits until nothing is staged or being written for `task`; returns the outcome of its last
  // write (NotFound if it never had one).
  absl::StatusOr<SnapshotInfo> Flush(absl::string_view task);
  // Waits until nothing is staged or being written; OK, or the latest error of each task whose last
  // write failed.
  absl::Status FlushAll();

  // Stops taking snapshots, writes what is staged until `deadline`, cancels what has not started
  // by then (its future gets Cancelled) and joins the threads; a write already under way always
  // finishes. OK if nothing was cancelled, else Cancelled naming each task and step left unwritten.
  // Idempotent.
  absl::Status Shutdown(absl::Time deadline = absl::InfiniteFuture());

  AsyncWriterStats stats() const;

 private:
  struct Request;
  struct TaskSlot {
    std::unique_ptr<Request> pending;  // staged, not started
    bool in_flight = false;
    bool staging = false;  // a Submit is between its checks and its enqueue
    std::optional<absl::StatusOr<SnapshotInfo>> last;
  };

  void WriterLoop();
  absl::StatusOr<SnapshotFuture> WriteSynchronously(const std::string& task, int64_t step,
                                                    absl::string_view metadata,
                                                    std::span<const std::span<const std::byte>> pieces,
                                                    SubmitOptions options)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::unique_ptr<Request> TakePendingLocked(TaskSlot& slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks that snapshots are taken and no other Submit for `task` is staging, then marks the
  // task's slot as staging.
  absl::StatusOr<TaskSlot*> BeginStagingLocked(const std::string& task, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void CompleteSuperseded(Request& replaced, int64_t by_step);
  static void Complete(Request& request, const absl::StatusOr<SnapshotInfo>& outcome);

  // Constant after construction.
  SnapshotStore* const store_;
  const AsyncWriterOptions options_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // any slot, the ready queue, the pool or stopping_ changed
  absl::node_hash_map<std::string, TaskSlot> slots_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);  // tasks with a pending request, FIFO
  StagingPool pool_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int staging_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Shutdown began: no new Submits
  bool closed_ ABSL_GUARDED_BY(mu_) = false;    // Shutdown stopped waiting: threads may exit
  AsyncWriterStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // joined by the first Shutdown
  absl::Mutex shutdown_mu_;           // serialises Shutdown calls
};

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_ASYNC_WRITER_H_
