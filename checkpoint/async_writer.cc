#include "checkpoint/async_writer.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/task_key.h"

namespace gpupool::checkpoint {

struct AsyncSnapshotWriter::Request {
  std::string task;
  int64_t step = 0;
  std::string metadata;
  uint64_t bytes = 0;
  std::unique_ptr<StagingBuffer> buffer;
  std::promise<absl::StatusOr<SnapshotInfo>> promise;
  std::function<void(const absl::StatusOr<SnapshotInfo>&)> on_done;
};

AsyncSnapshotWriter::AsyncSnapshotWriter(SnapshotStore* store, AsyncWriterOptions options)
    : store_(store), options_(options), pool_(options.staging_budget_bytes) {
  for (int i = 0; i < std::max(1, options_.writer_threads); ++i) {
    threads_.emplace_back([this] { WriterLoop(); });
  }
}

AsyncSnapshotWriter::~AsyncSnapshotWriter() { Shutdown().IgnoreError(); }

void AsyncSnapshotWriter::Complete(Request& request, const absl::StatusOr<SnapshotInfo>& outcome) {
  request.promise.set_value(outcome);
  if (request.on_done) request.on_done(outcome);
}

std::unique_ptr<AsyncSnapshotWriter::Request> AsyncSnapshotWriter::TakePendingLocked(
    TaskSlot& slot) {
  if (slot.pending == nullptr) return nullptr;
  std::unique_ptr<Request> taken = std::move(slot.pending);
  ready_.erase(std::find(ready_.begin(), ready_.end(), taken->task));
  return taken;
}

absl::Status AsyncSnapshotWriter::Prewarm(uint64_t bytes) {
  const uint64_t capacity = RoundUpToGranule(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (!pool_.Reserve(capacity)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot prewarm ", capacity, " bytes of checkpoint staging memory: the "
                       "budget is ", pool_.budget(), " bytes and ", pool_.reserved(),
                       " are already held"));
    }
  }
  absl::StatusOr<std::unique_ptr<StagingBuffer>> buffer = StagingBuffer::Allocate(capacity);
  absl::MutexLock lock(&mu_);
  if (!buffer.ok()) {
    pool_.Unreserve(capacity);
    return buffer.status();
  }
  pool_.Return(std::move(*buffer));
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<SnapshotFuture> AsyncSnapshotWriter::Submit(
    absl::string_view task_view, int64_t step, absl::string_view metadata,
    std::span<const std::span<const std::byte>> pieces, SubmitOptions options) {
  if (absl::Status s = ValidateTaskKey(task_view); !s.ok()) return s;
  if (metadata.size() > kMaxMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot metadata is ", metadata.size(),
                                                   " bytes; at most ", kMaxMetadataBytes));
  }
  const std::string task(task_view);
  uint64_t bytes = 0;
  for (const auto& piece : pieces) bytes += piece.size();
  const uint64_t capacity = RoundUpToGranule(std::max<uint64_t>(bytes, 1));
  if (capacity > options_.staging_budget_bytes) {
    return WriteSynchronously(task, step, metadata, pieces, std::move(options));
  }

  std::unique_ptr<StagingBuffer> buffer;
  std::unique_ptr<Request> replaced;
  bool allocate = false;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<TaskSlot*> begun = BeginStagingLocked(task, step);
    if (!begun.ok()) return begun.status();
    TaskSlot& slot = **begun;
    // A pending snapshot of this task is about to be superseded: its buffer is ours, no budget
    // needed (this is what lets a task checkpoint again while its previous write is still going).
    if (slot.pending != nullptr && slot.pending->buffer->capacity() >= bytes) {
      replaced = TakePendingLocked(slot);
      buffer = std::move(replaced->buffer);
    } else {
      bool timed_out = false;
      while (true) {
        buffer = pool_.TakeFree(bytes);
        if (buffer != nullptr) break;
        if (pool_.Reserve(capacity)) {
          allocate = true;
          break;
        }
        if (timed_out || stopping_) {
          slot.staging = false;
          --staging_;
          ++stats_.rejected_no_staging;
          changed_.SignalAll();
          return absl::ResourceExhaustedError(absl::StrCat(
              "snapshot of task \"", task, "\" at step ", step, " (", bytes,
              " bytes) not taken: the checkpoint staging budget of ", pool_.budget(),
              " bytes is held by snapshots still being written; retry at a later safe point or "
              "pass a later wait_for_staging_until"));
        }
        timed_out = changed_.WaitWithDeadline(&mu_, options.wait_for_staging_until);
      }
    }
  }

  if (allocate) {
    absl::StatusOr<std::unique_ptr<StagingBuffer>> allocated = StagingBuffer::Allocate(capacity);
    if (!allocated.ok()) {
      absl::MutexLock lock(&mu_);
      pool_.Unreserve(capacity);
      TaskSlot& slot = slots_[task];
      slot.staging = false;
      --staging_;
      if (replaced != nullptr) {  // cannot happen (we only allocate when not reusing), but be exact
        slot.pending = std::move(replaced);
        ready_.push_back(task);
      }
      changed_.SignalAll();
      return allocated.status();
    }
    buffer = std::move(*allocated);
  }

  // The one cost on the task's critical path: a memcpy into pre-faulted memory.
  uint64_t offset = 0;
  for (const auto& piece : pieces) {
    if (!piece.empty()) std::memcpy(buffer->data() + offset, piece.data(), piece.size());
    offset += piece.size();
  }

  auto request = std::make_unique<Request>();
  request->task = task;
  request->step = step;
  request->metadata = std::string(metadata);
  request->bytes = bytes;
  request->buffer = std::move(buffer);
  request->on_done = std::move(options.on_done);
  SnapshotFuture future = request->promise.get_future();
  std::unique_ptr<Request> unwritten;
  {
    absl::MutexLock lock(&mu_);
    TaskSlot& slot = slots_[task];
    // A pending one whose buffer was too small to reuse, and that the writer has not started
    // meanwhile, is superseded now. (When we reused a pending buffer, none can be pending here:
    // slot.staging kept every other Submit for this task out.)
    if (replaced == nullptr) {
      replaced = TakePendingLocked(slot);
      if (replaced != nullptr) pool_.Return(std::move(replaced->buffer));
    }
    slot.staging = false;
    --staging_;
    if (closed_) {  // Shutdown gave up waiting for this Submit: nobody is left to write it
      pool_.Return(std::move(request->buffer));
      ++stats_.cancelled_at_shutdown;
      unwritten = std::move(request);
    } else {
      slot.pending = std::move(request);
      ready_.push_back(task);
      ++stats_.staged;
    }
    if (replaced != nullptr) ++stats_.superseded;
    changed_.SignalAll();
  }
  if (unwritten != nullptr) {
    Complete(*unwritten, absl::CancelledError(absl::StrCat(
                             "snapshot of task \"", task, "\" at step ", step,
                             " not written: the writer was shut down while it was staged")));
  }
  if (replaced != nullptr) {
    CompleteSuperseded(*replaced, step);
  }
  return future;
}

absl::StatusOr<AsyncSnapshotWriter::TaskSlot*> AsyncSnapshotWriter::BeginStagingLocked(
    const std::string& task, int64_t step) {
  if (stopping_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot of task \"", task, "\" at step ", step, " refused: the writer is shut down"));
  }
  TaskSlot& slot = slots_[task];
  if (slot.staging) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot of task \"", task, "\" at step ", step,
        " refused: another Submit for the same task is staging (one thread per task)"));
  }
  slot.staging = true;
  ++staging_;
  return &slot;
}

void AsyncSnapshotWriter::CompleteSuperseded(Request& replaced, int64_t by_step) {
  Complete(replaced, absl::CancelledError(absl::StrCat(
                         "snapshot of task \"", replaced.task, "\" at step ", replaced.step,
                         " superseded before it was written by step ", by_step)));
}

absl::StatusOr<SnapshotFuture> AsyncSnapshotWriter::WriteSynchronously(
    const std::string& task, int64_t step, absl::string_view metadata,
    std::span<const std::span<const std::byte>> pieces, SubmitOptions options) {
  std::unique_ptr<Request> replaced;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<TaskSlot*> begun = BeginStagingLocked(task, step);
    if (!begun.ok()) return begun.status();
    TaskSlot& slot = **begun;
    replaced = TakePendingLocked(slot);
    if (replaced != nullptr) {
      pool_.Return(std::move(replaced->buffer));
      ++stats_.superseded;
    }
    // Never two writers for one task: wait for the one in flight.
    mu_.Await(absl::Condition(
        +[](TaskSlot* s) { return !s->in_flight; }, &slot));
    slot.staging = false;
    --staging_;
    slot.in_flight = true;
    ++in_flight_;
  }
  if (replaced != nullptr) {
    CompleteSuperseded(*replaced, step);
  }
  Request request;
  request.on_done = std::move(options.on_done);
  SnapshotFuture future = request.promise.get_future();
  absl::StatusOr<SnapshotInfo> outcome = store_->Write(task, step, metadata, pieces);
  Complete(request, outcome);
  absl::MutexLock lock(&mu_);
  TaskSlot& slot = slots_[task];
  slot.in_flight = false;
  --in_flight_;
  slot.last = outcome;
  ++stats_.written_synchronously;
  ++(outcome.ok() ? stats_.written : stats_.failed);
  changed_.SignalAll();
  return future;
}

void AsyncSnapshotWriter::WriterLoop() {
  if (options_.writer_nice > 0) {
    // Per thread on Linux (a thread is a process to setpriority). Failure only costs priority.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)),
                  std::min(options_.writer_nice, 19));
  }
  absl::MutexLock lock(&mu_);
  while (true) {
    // The oldest ready task that has no write in flight (another thread may be writing it).
    auto next = std::find_if(ready_.begin(), ready_.end(),
                             [this](const std::string& t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                               return !slots_[t].in_flight;
                             });
    if (next == ready_.end()) {
      if (closed_ && ready_.empty()) return;
      changed_.Wait(&mu_);
      continue;
    }
    TaskSlot& slot = slots_[*next];
    std::unique_ptr<Request> request = TakePendingLocked(slot);
    slot.in_flight = true;
    ++in_flight_;

    mu_.Unlock();
    std::span<const std::byte> piece[] = {
        std::span<const std::byte>(request->buffer->data(), request->bytes)};
    absl::StatusOr<SnapshotInfo> outcome =
        store_->Write(request->task, request->step, request->metadata, piece);
    mu_.Lock();
    // The buffer goes back before the future is fulfilled, so a task that waits for its snapshot
    // and takes the next one reuses it. The task stays in flight until the callback has run.
    pool_.Return(std::move(request->buffer));
    ++(outcome.ok() ? stats_.written : stats_.failed);  // counted before anyone can see it done
    changed_.SignalAll();
    mu_.Unlock();
    Complete(*request, outcome);
    mu_.Lock();

    TaskSlot& done = slots_[request->task];
    done.in_flight = false;
    --in_flight_;
    done.last = std::move(outcome);
    changed_.SignalAll();
  }
}

absl::StatusOr<SnapshotInfo> AsyncSnapshotWriter::Flush(absl::string_view task_view) {
  const std::string task(task_view);
  absl::MutexLock lock(&mu_);
  auto idle = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = slots_.find(task);
    return it == slots_.end() ||
           (it->second.pending == nullptr && !it->second.in_flight && !it->second.staging);
  };
  while (!idle()) changed_.Wait(&mu_);
  auto it = slots_.find(task);
  if (it == slots_.end() || !it->second.last.has_value()) {
    return absl::NotFoundError(absl::StrCat("no snapshot of task \"", task,
                                            "\" was submitted to this writer"));
  }
  return *it->second.last;
}

absl::Status AsyncSnapshotWriter::FlushAll() {
  absl::MutexLock lock(&mu_);
  while (!ready_.empty() || in_flight_ > 0 || staging_ > 0) changed_.Wait(&mu_);
  std::vector<std::string> failures;
  for (const auto& [task, slot] : slots_) {
    if (slot.last.has_value() && !slot.last->ok()) {
      failures.push_back(absl::StrCat("task \"", task, "\": ", slot.last->status().message()));
    }
  }
  if (failures.empty()) return absl::OkStatus();
  std::sort(failures.begin(), failures.end());
  return absl::InternalError(
      absl::StrCat("last snapshot write failed for ", failures.size(),
                   " task(s): ", absl::StrJoin(failures, "; ")));
}

absl::Status AsyncSnapshotWriter::Shutdown(absl::Time deadline) {
  absl::MutexLock serial(&shutdown_mu_);
  std::vector<std::unique_ptr<Request>> cancelled;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
    while (!ready_.empty() || in_flight_ > 0 || staging_ > 0) {
      if (changed_.WaitWithDeadline(&mu_, deadline)) break;
    }
    while (!ready_.empty()) {
      std::unique_ptr<Request> r = TakePendingLocked(slots_[ready_.front()]);
      pool_.Return(std::move(r->buffer));
      cancelled.push_back(std::move(r));
    }
    stats_.cancelled_at_shutdown += cancelled.size();
    closed_ = true;
    changed_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (cancelled.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  for (auto& r : cancelled) {
    names.push_back(absl::StrCat("task \"", r->task, "\" step ", r->step));
    Complete(*r, absl::CancelledError(absl::StrCat(
                     "snapshot of task \"", r->task, "\" at step ", r->step,
                     " not written: the writer was shut down before it started")));
  }
  return absl::CancelledError(absl::StrCat(cancelled.size(),
                                           " staged snapshot(s) not written at shutdown: ",
                                           absl::StrJoin(names, ", ")));
}

AsyncWriterStats AsyncSnapshotWriter::stats() const {
  absl::MutexLock lock(&mu_);
  AsyncWriterStats s = stats_;
  s.staging_bytes_reserved = pool_.reserved();
  return s;
}

}  // namespace gpupool::checkpoint
