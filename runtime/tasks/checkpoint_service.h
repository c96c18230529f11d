// File: runtime/tasks/checkpoint_service.h
//
// The job's side of checkpoints: the snapshot store and its background writer (checkpoint/),
// opened on first use so a job whose tasks never checkpoint creates no directory. Tasks hand it
// their state as host byte ranges; device state is staged to host memory by the caller.
//
// Thread-safe.
#ifndef GPUPOOL_RUNTIME_TASKS_CHECKPOINT_SERVICE_H_
#define GPUPOOL_RUNTIME_TASKS_CHECKPOINT_SERVICE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/async_writer.h"
#include "checkpoint/snapshot_store.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

struct CheckpointServiceOptions {
  std::string dir;            // empty: $GPUPOOL_CHECKPOINT_DIR, else <temp>/gpupool-checkpoints-<uid>
  bool shared = false;        // a directory several nodes mount
  int keep_last = 2;
  uint64_t staging_bytes = 2ull << 30;
};

class CheckpointService {
 public:
  explicit CheckpointService(CheckpointServiceOptions options) : options_(std::move(options)) {}
  ~CheckpointService();  // finishes the writes under way

  using Pieces = std::span<const std::span<const std::byte>>;

  // Stages a snapshot and returns at once; `on_committed` runs (on the writer's thread) when it is
  // durable. ResourceExhausted when no staging memory is free now: the caller tries again later.
  absl::Status SnapshotAsync(const std::string& key, int64_t step, Pieces pieces,
                             std::function<void(const checkpoint::SnapshotInfo&)> on_committed);
  // Stages (waiting for staging memory until `deadline`) and waits until the snapshot is durable.
  absl::StatusOr<checkpoint::SnapshotInfo> SnapshotNow(const std::string& key, int64_t step,
                                                       Pieces pieces, absl::Time deadline);
  // The newest committed snapshot streamed into `buffers` (after any write under way for the task
  // finished); nullopt when the task has none.
  absl::StatusOr<std::optional<checkpoint::LoadResult>> RestoreInto(
      const std::string& key, std::span<const std::span<std::byte>> buffers);
  // The same, returning the payload (callback-style tasks).
  absl::StatusOr<std::optional<checkpoint::LoadedSnapshot>> Restore(const std::string& key);
  // The task is done: its snapshots are deleted.
  void Forget(const std::string& key);

  std::string directory() const;

 private:
  struct Opened {  // both live as long as the service, once opened
    checkpoint::SnapshotStore* store = nullptr;
    checkpoint::AsyncSnapshotWriter* writer = nullptr;
  };
  absl::StatusOr<Opened> Open();  // opens on first use
  absl::Status EnsureOpen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CheckpointServiceOptions options_;
  mutable Mutex mu_;
  std::string dir_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<checkpoint::SnapshotStore> store_ ABSL_GUARDED_BY(mu_);  // set once
  std::unique_ptr<checkpoint::AsyncSnapshotWriter> writer_ ABSL_GUARDED_BY(mu_);  // set once
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_CHECKPOINT_SERVICE_H_
