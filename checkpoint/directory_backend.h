// File: checkpoint/directory_backend.h
//
// The two Backends over a POSIX directory:
//
//   auto local = NewLocalDirectoryBackend("/var/lib/gpupool/ckpt");        // a local disk
//   auto shared = NewSharedDirectoryBackend({.root = "/mnt/nfs/ckpt"});    // mounted on many nodes
//
// Both commit through the same steps (write a uniquely named temporary file, fsync, close and
// check close, rename, fsync the directory) and rely on nothing else. What differs on a shared
// directory:
//   - temporary names carry the host name as well as the pid, since pids repeat across nodes;
//   - a temporary left by another host cannot be proven abandoned (its pid means nothing here), so
//     it is removed only once it is older than `foreign_temp_age` by its mtime; this host's are
//     removed as soon as their pid is gone, as on a local directory;
//   - fsync of a directory that the file system refuses with EINVAL (some network file systems;
//     NFS makes rename durable on the server before replying) is not an error.
// A reader on another node sees a snapshot once the writer's rename has returned: NFS close-to-open
// consistency covers the file, and the store re-lists the directory on every load.
#ifndef GPUPOOL_CHECKPOINT_DIRECTORY_BACKEND_H_
#define GPUPOOL_CHECKPOINT_DIRECTORY_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/backend.h"

namespace gpupool::checkpoint {

struct DirectoryBackendOptions {
  std::string root;
  // Create the root (and its parents) when missing; otherwise a missing root is NotFound.
  bool create_if_missing = true;
  // Shared directories only: age after which another host's temporary file counts as abandoned.
  // Longer than any single snapshot write may take.
  absl::Duration foreign_temp_age = absl::Minutes(30);
};

// Errors name the root: InvalidArgument for an empty path or one that is not a directory,
// NotFound when missing and not to be created, PermissionDenied when not writable.
absl::StatusOr<std::unique_ptr<Backend>> NewLocalDirectoryBackend(DirectoryBackendOptions options);
absl::StatusOr<std::unique_ptr<Backend>> NewSharedDirectoryBackend(DirectoryBackendOptions options);

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_DIRECTORY_BACKEND_H_
