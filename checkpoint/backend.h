// File: checkpoint/backend.h
//
// The storage seam under the snapshot store: a directory tree that can create, append, fsync,
// atomically rename and list files. Nothing more is assumed (no locks, no O_DIRECT, no hard links,
// no xattrs), so the same store runs on a local disk and on a shared file system such as NFS.
// Paths given to a Backend are relative to its root ("task-7/snap-00000000000000000003.ckpt");
// every error message names the full path.
//
// Implementations: NewLocalDirectoryBackend / NewSharedDirectoryBackend (directory_backend.h);
// tests wrap one to inject faults (tests/checkpoint/fault_injecting_backend.h).
//
// Thread-safety: a Backend is called from several threads at once (one per task being written);
// implementations must be thread-safe. A WritableFile / ReadableFile is used by one thread.
#ifndef GPUPOOL_CHECKPOINT_BACKEND_H_
#define GPUPOOL_CHECKPOINT_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpupool::checkpoint {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(std::span<const std::byte> data) = 0;
  // Makes everything appended so far durable (fsync).
  virtual absl::Status Sync() = 0;
  // Must be called and checked: on NFS close() is where deferred write errors surface.
  virtual absl::Status Close() = 0;
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  virtual absl::StatusOr<uint64_t> Size() = 0;
  // Reads exactly out.size() bytes at offset; OutOfRange if the file ends first.
  virtual absl::Status ReadAt(uint64_t offset, std::span<std::byte> out) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // What and where, for messages: "local directory /var/ckpt".
  virtual std::string Describe() const = 0;
  // The full path of a relative one, for messages and warnings.
  virtual std::string FullPath(const std::string& path) const = 0;

  // Creates the directory if missing (parents must exist); OK if it already exists as a directory.
  // A new directory's entry is made durable (the parent is fsynced).
  virtual absl::Status CreateDir(const std::string& path) = 0;
  // Names (not paths) of the entries in a directory, any order; NotFound if it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // Creates a new file (fails if it exists) for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (POSIX rename within one directory).
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  // Makes renames and removals in the directory durable (fsync of the directory).
  virtual absl::Status SyncDir(const std::string& path) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Removes an empty directory.
  virtual absl::Status RemoveDir(const std::string& path) = 0;

  // A suffix that makes a temporary name unique to this writer among every process that may share
  // the directory: ".tmp.<pid>.<n>" locally, ".tmp.<host>.<pid>.<n>" on a shared file system.
  virtual std::string TempSuffix() = 0;
  // Whether the temporary file `name` in directory `dir` was left by a writer that is gone and may
  // be removed now. Never true for a temporary of a live writer this backend can see.
  virtual bool IsAbandonedTemp(const std::string& dir, const std::string& name) = 0;
};

// The marker every temporary name carries; nothing else in a store directory contains it.
inline constexpr char kTempMarker[] = ".tmp.";

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_BACKEND_H_
