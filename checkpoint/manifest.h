// File: checkpoint/manifest.h
//
// The per-task index of retained snapshots, newest first, written after each commit. A snapshot is
// committed once its file is renamed into place (every snapshot file verifies itself), so the
// manifest is a cross-check rather than the commit point: it says which files the writer retained
// and what checksum each must have, which is how a load notices a listed file that went missing or
// was replaced. A load still lists the directory, so a snapshot committed just before a crash that
// kept the manifest from being updated is found.
//
//   gpupool-checkpoint-manifest 1
//   task job-3.task-17
//   snapshot 12 4800 1073741824 9f3c...e1 snap-00000000000000000012.ckpt
//   end 5d21...07                       <- XXH3-64 of every byte above this line
#ifndef GPUPOOL_CHECKPOINT_MANIFEST_H_
#define GPUPOOL_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace gpupool::checkpoint {

inline constexpr char kManifestName[] = "MANIFEST";

struct ManifestEntry {
  uint64_t version = 0;
  int64_t step = 0;
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;
  std::string file;  // name within the task's directory
};

// "snap-<version, 20 digits>.ckpt": names sort in version order.
std::string SnapshotFileName(uint64_t version);
// The version of a committed snapshot file name; nullopt for anything else (temporaries included).
std::optional<uint64_t> ParseSnapshotFileName(absl::string_view name);

std::string EncodeManifest(absl::string_view task, const std::vector<ManifestEntry>& newest_first);
// DataLoss naming `path` when the text is damaged, truncated or belongs to another task.
absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(absl::string_view text,
                                                         absl::string_view task,
                                                         absl::string_view path);

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_MANIFEST_H_
