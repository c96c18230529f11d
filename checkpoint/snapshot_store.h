// File: checkpoint/snapshot_store.h
//
// Versioned, checksummed, durable snapshots per task, the last `keep_last` kept. This is the
// synchronous core; AsyncSnapshotWriter (async_writer.h) stages and writes in the background.
//
//   auto backend = NewLocalDirectoryBackend({.root = "/var/lib/gpupool/ckpt"});
//   auto store = SnapshotStore::Open({.backend = std::move(*backend), .keep_last = 3});
//   std::span<const std::byte> pieces[] = {weights, optimizer_state};
//   absl::StatusOr<SnapshotInfo> w = (*store)->Write("job-3.task-17", step, metadata, pieces);
//   ...
//   absl::StatusOr<LoadResult> r = (*store)->LoadInto("job-3.task-17", {weights, optimizer});
//   if (r.ok()) resume_from_step = r->info.step;   // r->warnings names any file skipped
//
// Layout: <root>/<task>/snap-<version>.ckpt (snapshot_file.h) and <root>/<task>/MANIFEST
// (manifest.h). A write is: a uniquely named temporary file, the pieces streamed into it with
// their checksum, fsync, close, rename to the snapshot's name (the commit point), the manifest
// rewritten the same way (temporary, fsync, rename), one fsync of the directory that makes both
// renames durable, then snapshots beyond keep_last removed. A failure at any step before the
// snapshot's rename removes the temporary file and leaves every committed snapshot as it was.
//
// Loading takes the newest version whose file verifies. A snapshot that is truncated, bit-flipped,
// missing though listed, or not the file the manifest recorded is skipped with a warning naming
// it, and the previous one is used; a damaged manifest is skipped the same way (the directory
// listing still finds every snapshot).
//
// Guarantees: after Write returns OK, the snapshot survives a process crash, and survives power
// loss if the device honours fsync. A crash or power loss during a Write loses that snapshot only.
//
// Thread-safety: thread-safe. Calls for one task are serialised (a per-task lock); calls for
// different tasks run in parallel. One process at a time may write a given task: the runtime's
// lease guarantees it (two would each commit whole snapshots, but their version numbers could
// collide and one would replace the other).
#ifndef GPUPOOL_CHECKPOINT_SNAPSHOT_STORE_H_
#define GPUPOOL_CHECKPOINT_SNAPSHOT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "checkpoint/backend.h"
#include "checkpoint/snapshot_file.h"

namespace gpupool::checkpoint {

// Receives every warning the store raises (skipped snapshots, abandoned temporary files removed,
// a manifest that could not be updated). Called from whichever thread raised it; must be
// thread-safe. Loads also return their warnings in LoadResult.
using WarningSink = std::function<void(absl::string_view warning)>;
// Writes "gpupool checkpoint: warning: <text>" lines to stderr.
WarningSink StderrWarningSink();

struct StoreOptions {
  std::unique_ptr<Backend> backend;  // required
  // Snapshots kept per task (counted by file, not re-verified). At least 1; 2 or more leaves a
  // fallback should the newest be damaged later.
  int keep_last = 3;
  WarningSink warning_sink;  // null: StderrWarningSink()
};

struct LoadResult {
  SnapshotInfo info;
  // One line per snapshot or manifest skipped on the way, each naming its file and what was wrong.
  std::vector<std::string> warnings;
};

struct LoadedSnapshot {
  LoadResult result;
  std::vector<std::byte> payload;
};

class SnapshotStore {
 public:
  // Validates the options (InvalidArgument naming what is wrong) and removes the temporary files
  // abandoned by writers that died (each removal is a warning).
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> Open(StoreOptions options);
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // Commits a new snapshot of `task` whose payload is the concatenation of `pieces` (streamed, never
  // concatenated in memory). Returns what was committed. Errors keep the failing call's code, with
  // the task, step and path in the message: ResourceExhausted for a full disk, InvalidArgument for
  // a bad key or oversized metadata. On error nothing committed before is touched.
  absl::StatusOr<SnapshotInfo> Write(absl::string_view task, int64_t step,
                                     absl::string_view metadata,
                                     std::span<const std::span<const std::byte>> pieces);

  // The newest valid snapshot with its payload. NotFound when the task has none (the message lists
  // what was skipped).
  absl::StatusOr<LoadedSnapshot> Load(absl::string_view task);

  // As Load, but streams the payload into `buffers` in order (no intermediate copy); for a task
  // resuming into its registered state. FailedPrecondition if the newest structurally sound
  // snapshot's payload size differs from the buffers' total: the task's state layout changed, and
  // falling back to an older snapshot would not fix that. On error the buffers' contents are
  // unspecified (a snapshot may have been partly streamed into them before its checksum failed).
  absl::StatusOr<LoadResult> LoadInto(absl::string_view task,
                                      std::span<const std::span<std::byte>> buffers);

  // The snapshots the manifest retains, newest first, without reading or verifying them. Empty if
  // the task has none; DataLoss if the manifest is damaged.
  absl::StatusOr<std::vector<SnapshotInfo>> List(absl::string_view task);

  // Deletes every snapshot of the task and its directory (the task finished). OK if none.
  absl::Status Remove(absl::string_view task);

  // Removes temporary files abandoned by dead writers in every task directory; Open calls it.
  // Returns how many were removed.
  absl::StatusOr<int> RemoveAbandonedTemps();

  const Backend& backend() const { return *backend_; }
  int keep_last() const { return keep_last_; }

 private:
  struct TaskState;
  SnapshotStore(std::unique_ptr<Backend> backend, int keep_last, WarningSink sink);

  TaskState& StateFor(const std::string& task) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status LoadTaskState(const std::string& task, TaskState& state);
  absl::StatusOr<LoadResult> LoadNewest(
      const std::string& task, const std::function<absl::Status(const SnapshotInfo&)>& check,
      const std::function<void(uint64_t, std::span<const std::byte>)>& sink);
  absl::Status CommitManifest(const std::string& task, TaskState& state);
  void Warn(absl::string_view warning) const;

  // Constant after construction.
  const std::unique_ptr<Backend> backend_;
  const int keep_last_;
  const WarningSink sink_;

  mutable absl::Mutex mu_;
  // Entries are never erased, so references handed out stay valid.
  absl::flat_hash_map<std::string, std::unique_ptr<TaskState>> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_SNAPSHOT_STORE_H_
