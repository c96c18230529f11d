// File: checkpoint/errno_status.h
//
// One mapping from a failed system call to absl::Status for everything in checkpoint/, so a full
// disk is always ResourceExhausted (the caller frees space or fails over, it does not retry in a
// loop) and every message names the call and the path:
//
//   if (::fsync(fd) != 0) return ErrnoStatus("fsync", path, errno);
//   // -> ResourceExhausted "fsync(/ckpt/t/snap-1.ckpt.tmp.42.0): No space left on device"
#ifndef GPUPOOL_CHECKPOINT_ERRNO_STATUS_H_
#define GPUPOOL_CHECKPOINT_ERRNO_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace gpupool::checkpoint {

// ENOSPC/EDQUOT -> ResourceExhausted, ENOENT -> NotFound, EACCES/EPERM/EROFS -> PermissionDenied,
// ENOTDIR -> FailedPrecondition, anything else Internal.
absl::Status ErrnoStatus(absl::string_view call, absl::string_view path, int err);

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_ERRNO_STATUS_H_
