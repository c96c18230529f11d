#include "checkpoint/snapshot_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/manifest.h"
#include "checkpoint/task_key.h"

namespace gpupool::checkpoint {

struct SnapshotStore::TaskState {
  absl::Mutex mu;  // held for the whole of any operation on the task
  bool loaded ABSL_GUARDED_BY(mu) = false;
  uint64_t next_version ABSL_GUARDED_BY(mu) = 1;
  std::vector<ManifestEntry> retained ABSL_GUARDED_BY(mu);  // newest first
};

namespace {

absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

std::string Join(absl::string_view dir, absl::string_view name) { return absl::StrCat(dir, "/", name); }

// Writes a small file through the backend with the same temporary/fsync/rename steps as a
// snapshot, so a manifest is never seen half written. The caller fsyncs the directory (once for
// the snapshot's rename and this one together).
absl::Status WriteSmallFileAndRename(Backend& backend, const std::string& dir,
                                     const std::string& name, absl::string_view content) {
  const std::string final_path = Join(dir, name);
  const std::string tmp = final_path + backend.TempSuffix();
  absl::StatusOr<std::unique_ptr<WritableFile>> file = backend.NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  absl::Status s = (*file)->Append(std::as_bytes(std::span(content.data(), content.size())));
  if (s.ok()) s = (*file)->Sync();
  absl::Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = backend.Rename(tmp, final_path);
  if (!s.ok()) backend.RemoveFile(tmp).IgnoreError();
  return s;
}

absl::StatusOr<std::string> ReadSmallFile(Backend& backend, const std::string& path) {
  absl::StatusOr<std::unique_ptr<ReadableFile>> file = backend.NewReadableFile(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<uint64_t> size = (*file)->Size();
  if (!size.ok()) return size.status();
  if (*size > (64u << 20)) {
    return absl::DataLossError(absl::StrCat(backend.FullPath(path), " is implausibly large (",
                                            *size, " bytes)"));
  }
  std::string text(*size, '\0');
  absl::Status s = (*file)->ReadAt(0, std::as_writable_bytes(std::span(text.data(), text.size())));
  if (!s.ok()) return s;
  return text;
}

}  // namespace

WarningSink StderrWarningSink() {
  return [](absl::string_view warning) {
    std::fprintf(stderr, "gpupool checkpoint: warning: %.*s\n", static_cast<int>(warning.size()),
                 warning.data());
  };
}

SnapshotStore::SnapshotStore(std::unique_ptr<Backend> backend, int keep_last, WarningSink sink)
    : backend_(std::move(backend)), keep_last_(keep_last), sink_(std::move(sink)) {}
SnapshotStore::~SnapshotStore() = default;

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(StoreOptions options) {
  if (options.backend == nullptr) {
    return absl::InvalidArgumentError("checkpoint store options: backend is null");
  }
  if (options.keep_last < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint store options: keep_last is ", options.keep_last,
                     "; it must be at least 1 (the newest committed snapshot is always kept)"));
  }
  if (!options.warning_sink) options.warning_sink = StderrWarningSink();
  std::unique_ptr<SnapshotStore> store(new SnapshotStore(
      std::move(options.backend), options.keep_last, std::move(options.warning_sink)));
  absl::StatusOr<int> removed = store->RemoveAbandonedTemps();
  if (!removed.ok()) {
    return WithContext(removed.status(),
                       absl::StrCat("opening checkpoint store in ", store->backend_->Describe()));
  }
  return store;
}

void SnapshotStore::Warn(absl::string_view warning) const { sink_(warning); }

absl::StatusOr<int> SnapshotStore::RemoveAbandonedTemps() {
  absl::StatusOr<std::vector<std::string>> tasks = backend_->ListDir("");
  if (!tasks.ok()) return tasks.status();
  int removed = 0;
  for (const std::string& task : *tasks) {
    if (!ValidateTaskKey(task).ok()) continue;  // not ours
    absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(task);
    if (!names.ok()) continue;  // a plain file, or raced with Remove
    for (const std::string& name : *names) {
      if (name.find(kTempMarker) == std::string::npos || !backend_->IsAbandonedTemp(task, name)) {
        continue;
      }
      const std::string path = Join(task, name);
      if (absl::Status s = backend_->RemoveFile(path); s.ok()) {
        ++removed;
        Warn(absl::StrCat("removed temporary file ", backend_->FullPath(path),
                          " abandoned by a writer that died"));
      } else if (!absl::IsNotFound(s)) {
        Warn(absl::StrCat("could not remove abandoned temporary file: ", s.message()));
      }
    }
  }
  return removed;
}

SnapshotStore::TaskState& SnapshotStore::StateFor(const std::string& task) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<TaskState>& state = tasks_[task];
  if (state == nullptr) state = std::make_unique<TaskState>();
  return *state;
}

// Learns the next version and the retained list from disk, the first time this process writes the
// task (it may have been written by another process or node before).
absl::Status SnapshotStore::LoadTaskState(const std::string& task, TaskState& state)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  if (state.loaded) return absl::OkStatus();
  if (absl::Status s = backend_->CreateDir(task); !s.ok()) return s;
  absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(task);
  if (!names.ok()) return names.status();
  uint64_t max_version = 0;
  std::vector<ManifestEntry> on_disk;
  for (const std::string& name : *names) {
    if (std::optional<uint64_t> v = ParseSnapshotFileName(name)) {
      max_version = std::max(max_version, *v);
      on_disk.push_back(ManifestEntry{.version = *v, .file = name});
    }
  }
  std::vector<ManifestEntry> retained;
  const std::string manifest_path = Join(task, kManifestName);
  absl::StatusOr<std::string> text = ReadSmallFile(*backend_, manifest_path);
  absl::StatusOr<std::vector<ManifestEntry>> parsed =
      text.ok() ? ParseManifest(*text, task, backend_->FullPath(manifest_path))
                : absl::StatusOr<std::vector<ManifestEntry>>(text.status());
  if (parsed.ok()) {
    retained = std::move(*parsed);
  } else {
    if (!absl::IsNotFound(parsed.status())) {
      Warn(absl::StrCat("rebuilding the manifest of task \"", task,
                        "\" from its directory: ", parsed.status().message()));
    }
    // Without a manifest, retain what the directory holds (unverified: checksums unknown).
    std::sort(on_disk.begin(), on_disk.end(),
              [](const ManifestEntry& a, const ManifestEntry& b) { return a.version > b.version; });
    retained = std::move(on_disk);
  }
  for (const ManifestEntry& e : retained) max_version = std::max(max_version, e.version);
  state.next_version = max_version + 1;
  state.retained = std::move(retained);
  state.loaded = true;
  return absl::OkStatus();
}

absl::Status SnapshotStore::CommitManifest(const std::string& task, TaskState& state)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  return WriteSmallFileAndRename(*backend_, task, kManifestName,
                                 EncodeManifest(task, state.retained));
}

absl::StatusOr<SnapshotInfo> SnapshotStore::Write(
    absl::string_view task_view, int64_t step, absl::string_view metadata,
    std::span<const std::span<const std::byte>> pieces) {
  if (absl::Status s = ValidateTaskKey(task_view); !s.ok()) return s;
  const std::string task(task_view);
  TaskState& state = StateFor(task);
  absl::MutexLock lock(&state.mu);
  const std::string context = absl::StrCat("checkpoint of task \"", task, "\" at step ", step);
  if (absl::Status s = LoadTaskState(task, state); !s.ok()) return WithContext(s, context);

  const uint64_t version = state.next_version;
  const std::string final_path = Join(task, SnapshotFileName(version));
  const std::string tmp = final_path + backend_->TempSuffix();
  absl::StatusOr<std::unique_ptr<WritableFile>> file = backend_->NewWritableFile(tmp);
  if (!file.ok()) return WithContext(file.status(), context);
  absl::StatusOr<uint64_t> checksum = WriteSnapshotFile(**file, version, step, metadata, pieces);
  absl::Status s = checksum.status();
  if (s.ok()) s = (*file)->Sync();
  absl::Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = backend_->Rename(tmp, final_path);
  if (!s.ok()) {
    backend_->RemoveFile(tmp).IgnoreError();
    return WithContext(s, context);
  }
  // Committed: the file is whole under its final name. From here on the version is used.
  state.next_version = version + 1;
  uint64_t payload_bytes = 0;
  for (const auto& piece : pieces) payload_bytes += piece.size();
  SnapshotInfo info{.version = version, .step = step, .metadata = std::string(metadata),
                    .payload_bytes = payload_bytes, .checksum = *checksum,
                    .path = backend_->FullPath(final_path)};
  state.retained.insert(state.retained.begin(),
                        ManifestEntry{.version = version, .step = step,
                                      .payload_bytes = payload_bytes, .checksum = *checksum,
                                      .file = SnapshotFileName(version)});
  std::vector<ManifestEntry> dropped;
  if (state.retained.size() > static_cast<size_t>(keep_last_)) {
    dropped.assign(state.retained.begin() + keep_last_, state.retained.end());
    state.retained.resize(keep_last_);
  }
  absl::Status manifest = CommitManifest(task, state);
  // One directory fsync makes both renames durable: the snapshot's (the commit) and the
  // manifest's. Each fsync is a journal commit, a fixed cost that dominates small snapshots.
  if (absl::Status synced = backend_->SyncDir(task); !synced.ok()) {
    state.retained.insert(state.retained.end(), dropped.begin(), dropped.end());
    // The snapshot is in place but its name may not survive a power loss.
    return WithContext(synced, absl::StrCat(context, ": snapshot committed but not yet durable"));
  }
  if (!manifest.ok()) {
    // Loads list the directory, so the new snapshot is found anyway; keep the old files until a
    // manifest that no longer lists them is durable.
    Warn(absl::StrCat(context, ": snapshot ", info.path,
                      " committed, but the manifest was not updated: ", manifest.message()));
    state.retained.insert(state.retained.end(), dropped.begin(), dropped.end());
    return info;
  }
  // Retention: the dropped ones, and any older unlisted file (left by a crash before its
  // manifest update, or by a lower keep_last earlier).
  std::set<std::string> keep;
  for (const ManifestEntry& e : state.retained) keep.insert(e.file);
  absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(task);
  if (names.ok()) {
    for (const std::string& name : *names) {
      std::optional<uint64_t> v = ParseSnapshotFileName(name);
      if (!v || *v >= version || keep.contains(name)) continue;
      if (absl::Status r = backend_->RemoveFile(Join(task, name)); !r.ok() && !absl::IsNotFound(r)) {
        Warn(absl::StrCat(context, ": could not remove an old snapshot: ", r.message()));
      }
    }
  }
  return info;
}

absl::StatusOr<LoadResult> SnapshotStore::LoadNewest(
    const std::string& task, const std::function<absl::Status(const SnapshotInfo&)>& check,
    const std::function<void(uint64_t, std::span<const std::byte>)>& sink) {
  LoadResult result;
  auto warn = [&](std::string text) {
    Warn(text);
    result.warnings.push_back(std::move(text));
  };
  absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(task);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) {
      return absl::NotFoundError(absl::StrCat("no snapshot of task \"", task, "\" in ",
                                              backend_->Describe()));
    }
    return names.status();
  }
  // version -> (file name, checksum the manifest expects or nullopt)
  std::map<uint64_t, std::pair<std::string, std::optional<uint64_t>>, std::greater<>> candidates;
  std::set<uint64_t> present;
  for (const std::string& name : *names) {
    if (std::optional<uint64_t> v = ParseSnapshotFileName(name)) {
      candidates[*v] = {name, std::nullopt};
      present.insert(*v);
    }
  }
  const std::string manifest_path = Join(task, kManifestName);
  absl::StatusOr<std::string> text = ReadSmallFile(*backend_, manifest_path);
  if (text.ok()) {
    absl::StatusOr<std::vector<ManifestEntry>> entries =
        ParseManifest(*text, task, backend_->FullPath(manifest_path));
    if (entries.ok()) {
      for (const ManifestEntry& e : *entries) {
        if (!present.contains(e.version)) candidates[e.version].first = e.file;  // missing
        candidates[e.version].second = e.checksum;
      }
    } else {
      warn(absl::StrCat(entries.status().message(), "; using the directory listing instead"));
    }
  } else if (!absl::IsNotFound(text.status())) {
    warn(absl::StrCat("manifest unreadable: ", text.status().message(),
                      "; using the directory listing instead"));
  }

  for (const auto& [version, candidate] : candidates) {
    const auto& [name, expected_checksum] = candidate;
    const std::string path = Join(task, name);
    const std::string full = backend_->FullPath(path);
    if (!present.contains(version)) {
      warn(absl::StrCat("snapshot ", full, " listed in the manifest is missing; using an older one"));
      continue;
    }
    absl::StatusOr<std::unique_ptr<ReadableFile>> file = backend_->NewReadableFile(path);
    if (!file.ok()) {
      warn(absl::StrCat("snapshot ", full, " skipped: ", file.status().message()));
      continue;
    }
    absl::StatusOr<std::unique_ptr<SnapshotReader>> reader =
        SnapshotReader::Open(std::move(*file), full);
    if (!reader.ok()) {
      warn(absl::StrCat(reader.status().message(), "; using an older snapshot"));
      continue;
    }
    const SnapshotInfo& info = (*reader)->info();
    if (info.version != version) {
      warn(absl::StrCat("snapshot ", full, " holds version ", info.version,
                        ", not the version its name says; using an older snapshot"));
      continue;
    }
    if (expected_checksum && *expected_checksum != info.checksum) {
      warn(absl::StrCat("snapshot ", full, " is not the file the manifest recorded (checksum ",
                        absl::Hex(info.checksum), ", manifest says ",
                        absl::Hex(*expected_checksum), "); using an older snapshot"));
      continue;
    }
    if (absl::Status s = check(info); !s.ok()) return s;
    if (absl::Status s = (*reader)->ReadPayload(sink); !s.ok()) {
      warn(absl::StrCat(s.message(), "; using an older snapshot"));
      continue;
    }
    result.info = info;
    return result;
  }
  std::string message = absl::StrCat("no valid snapshot of task \"", task, "\" in ",
                                     backend_->Describe());
  if (!result.warnings.empty()) {
    absl::StrAppend(&message, " (skipped: ", absl::StrJoin(result.warnings, "; "), ")");
  }
  return absl::NotFoundError(message);
}

absl::StatusOr<LoadedSnapshot> SnapshotStore::Load(absl::string_view task_view) {
  if (absl::Status s = ValidateTaskKey(task_view); !s.ok()) return s;
  const std::string task(task_view);
  TaskState& state = StateFor(task);
  absl::MutexLock lock(&state.mu);
  LoadedSnapshot loaded;
  absl::StatusOr<LoadResult> result = LoadNewest(
      task,
      [&](const SnapshotInfo& info) {
        loaded.payload.resize(info.payload_bytes);
        return absl::OkStatus();
      },
      [&](uint64_t offset, std::span<const std::byte> chunk) {
        std::memcpy(loaded.payload.data() + offset, chunk.data(), chunk.size());
      });
  if (!result.ok()) return result.status();
  loaded.result = std::move(*result);
  return loaded;
}

absl::StatusOr<LoadResult> SnapshotStore::LoadInto(absl::string_view task_view,
                                                   std::span<const std::span<std::byte>> buffers) {
  if (absl::Status s = ValidateTaskKey(task_view); !s.ok()) return s;
  const std::string task(task_view);
  uint64_t total = 0;
  for (const auto& b : buffers) total += b.size();
  TaskState& state = StateFor(task);
  absl::MutexLock lock(&state.mu);
  return LoadNewest(
      task,
      [&](const SnapshotInfo& info) {
        if (info.payload_bytes == total) return absl::OkStatus();
        return absl::FailedPreconditionError(absl::StrCat(
            "snapshot ", info.path, " of task \"", task, "\" holds ", info.payload_bytes,
            " payload bytes but the buffers to load it into hold ", total,
            " (did the task's registered state change?)"));
      },
      [&](uint64_t offset, std::span<const std::byte> chunk) {
        // Scatter the chunk over the buffers it spans; buffers are few, so a walk is cheap.
        uint64_t start = 0;
        for (std::span<std::byte> b : buffers) {
          const uint64_t end = start + b.size();
          if (offset < end && !chunk.empty()) {
            const uint64_t at = offset - start;
            const size_t n = static_cast<size_t>(std::min<uint64_t>(b.size() - at, chunk.size()));
            std::memcpy(b.data() + at, chunk.data(), n);
            chunk = chunk.subspan(n);
            offset += n;
          }
          start = end;
        }
      });
}

absl::StatusOr<std::vector<SnapshotInfo>> SnapshotStore::List(absl::string_view task_view) {
  if (absl::Status s = ValidateTaskKey(task_view); !s.ok()) return s;
  const std::string task(task_view);
  const std::string manifest_path = Join(task, kManifestName);
  absl::StatusOr<std::string> text = ReadSmallFile(*backend_, manifest_path);
  if (absl::IsNotFound(text.status())) return std::vector<SnapshotInfo>{};
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<ManifestEntry>> entries =
      ParseManifest(*text, task, backend_->FullPath(manifest_path));
  if (!entries.ok()) return entries.status();
  std::vector<SnapshotInfo> out;
  for (const ManifestEntry& e : *entries) {
    out.push_back(SnapshotInfo{.version = e.version, .step = e.step,
                               .payload_bytes = e.payload_bytes, .checksum = e.checksum,
                               .path = backend_->FullPath(Join(task, e.file))});
  }
  return out;
}

absl::Status SnapshotStore::Remove(absl::string_view task_view) {
  if (absl::Status s = ValidateTaskKey(task_view); !s.ok()) return s;
  const std::string task(task_view);
  TaskState& state = StateFor(task);
  absl::MutexLock lock(&state.mu);
  absl::StatusOr<std::vector<std::string>> names = backend_->ListDir(task);
  if (absl::IsNotFound(names.status())) return absl::OkStatus();
  if (!names.ok()) return names.status();
  // The manifest first, so a crash part-way leaves nothing that claims to be complete.
  std::vector<std::string> order = *names;
  std::stable_partition(order.begin(), order.end(),
                        [](const std::string& n) { return n == kManifestName; });
  for (const std::string& name : order) {
    absl::Status s = backend_->RemoveFile(Join(task, name));
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  absl::Status s = backend_->RemoveDir(task);
  if (!s.ok() && !absl::IsNotFound(s)) return s;
  state.loaded = false;
  state.retained.clear();
  return backend_->SyncDir("");
}

}  // namespace gpupool::checkpoint
