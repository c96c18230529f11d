// File: checkpoint/snapshot_file.h
//
// The on-disk form of one snapshot, self-describing and self-verifying so that any single file can
// be judged on its own, without the manifest:
//
//   header   40 bytes  "GPUPCKPT", format (u32 = 1), header size (u32 = 40), version (u64),
//                      step (i64), metadata length (u64)
//   metadata           the caller's opaque blob (at most kMaxMetadataBytes)
//   payload            the caller's bytes, written piece by piece as handed over
//   footer   24 bytes  payload length (u64), XXH3-64 of every byte before this field and of the
//                      payload length (u64), "GPCKEND1"
//
// Integers are little-endian. The checksum and the payload length sit at the end because the
// payload is streamed: a file cut anywhere lacks a matching footer (its sizes do not add up), and a
// flipped bit anywhere fails the checksum. Readers report either as DataLoss naming the file.
#ifndef GPUPOOL_CHECKPOINT_SNAPSHOT_FILE_H_
#define GPUPOOL_CHECKPOINT_SNAPSHOT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "checkpoint/backend.h"
#include "checkpoint/checksum.h"

namespace gpupool::checkpoint {

inline constexpr uint64_t kMaxMetadataBytes = 1 << 20;
inline constexpr size_t kSnapshotHeaderBytes = 40;
inline constexpr size_t kSnapshotFooterBytes = 24;

// What a committed snapshot is, as returned by writes and loads.
struct SnapshotInfo {
  uint64_t version = 0;  // per task, +1 with every commit; the newest valid version wins
  int64_t step = 0;      // the task's step when it was taken: a resumed task continues from here
  std::string metadata;  // the caller's opaque blob, returned as given
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
  std::string path;  // the file's full path, for messages
};

// Writes one snapshot file: the pieces are appended in order (in chunks, each hashed just before
// it is written, so the checksum adds no pass over memory of its own). Does not sync or close.
// Returns the checksum.
absl::StatusOr<uint64_t> WriteSnapshotFile(WritableFile& file, uint64_t version, int64_t step,
                                           absl::string_view metadata,
                                           std::span<const std::span<const std::byte>> pieces);

// Reads one snapshot file: Open checks the structure (magic, sizes adding up to the file's size,
// metadata bound) and ReadPayload streams the payload while hashing, verifying the checksum at the
// end. Only a ReadPayload that returns OK proves the file whole. Errors are DataLoss naming `path`
// for a damaged file, or the backend's error for an unreadable one.
class SnapshotReader {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotReader>> Open(std::unique_ptr<ReadableFile> file,
                                                             std::string path);
  ~SnapshotReader();

  // Valid after Open, except checksum, which is the one the footer claims until ReadPayload says.
  const SnapshotInfo& info() const { return info_; }

  // Hands the payload to `sink` in order, in chunks, then verifies the checksum. Nothing handed to
  // the sink is trustworthy unless this returns OK.
  absl::Status ReadPayload(absl::FunctionRef<void(uint64_t offset, std::span<const std::byte>)> sink);

 private:
  SnapshotReader(std::unique_ptr<ReadableFile> file, std::unique_ptr<Checksummer> hash);
  std::unique_ptr<ReadableFile> file_;
  std::unique_ptr<Checksummer> hash_;  // over header and metadata after Open
  SnapshotInfo info_;
};

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_SNAPSHOT_FILE_H_
