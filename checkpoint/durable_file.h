// File: checkpoint/durable_file.h
//
// Writing a file so that after a crash or power loss it is either the complete new content or
// the complete old one, never a mix: write to a temporary file in the same directory, fsync it,
// rename it over the target (atomic on POSIX file systems), then fsync the directory so the
// rename itself is durable. This is the primitive the snapshot store commits through.
//
//   absl::Status s = WriteFileDurably("/ckpt/task-7/manifest", bytes);
//
// Errors name the path and the failing system call with its errno text: a full disk is
// ResourceExhausted (the old file is untouched), anything else Internal or NotFound.
#ifndef GPUPOOL_CHECKPOINT_DURABLE_FILE_H_
#define GPUPOOL_CHECKPOINT_DURABLE_FILE_H_

#include <cstddef>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpupool::checkpoint {

absl::Status WriteFileDurably(const std::string& path, std::span<const std::byte> data);

absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_DURABLE_FILE_H_
