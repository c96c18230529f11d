#include "runtime/tasks/checkpoint_service.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/directory_backend.h"

namespace gpupool::runtime {

CheckpointService::~CheckpointService() {
  MutexLock lock(&mu_);
  if (writer_ != nullptr) (void)writer_->Shutdown();
}

absl::Status CheckpointService::EnsureOpen() {
  if (store_ != nullptr) return absl::OkStatus();
  std::string dir = options_.dir;
  if (dir.empty()) {
    const char* env = std::getenv("GPUPOOL_CHECKPOINT_DIR");
    dir = env != nullptr && *env != '\0'
              ? std::string(env)
              // One per user: the directories are private to their user (0700).
              : (std::filesystem::temp_directory_path() / absl::StrCat("gpupool-checkpoints-", ::getuid())).string();
  }
  absl::StatusOr<std::unique_ptr<checkpoint::Backend>> backend =
      options_.shared ? checkpoint::NewSharedDirectoryBackend({.root = dir})
                      : checkpoint::NewLocalDirectoryBackend({.root = dir});
  if (!backend.ok()) {
    return absl::Status(backend.status().code(),
                        absl::StrCat("checkpoint directory ", dir, ": ", backend.status().message()));
  }
  absl::StatusOr<std::unique_ptr<checkpoint::SnapshotStore>> store = checkpoint::SnapshotStore::Open(
      {.backend = *std::move(backend), .keep_last = options_.keep_last});
  if (!store.ok()) return store.status();
  store_ = *std::move(store);
  writer_ = std::make_unique<checkpoint::AsyncSnapshotWriter>(
      store_.get(), checkpoint::AsyncWriterOptions{.staging_budget_bytes = options_.staging_bytes});
  dir_ = dir;
  return absl::OkStatus();
}

std::string CheckpointService::directory() const {
  MutexLock lock(&mu_);
  return dir_;
}

absl::StatusOr<CheckpointService::Opened> CheckpointService::Open() {
  MutexLock lock(&mu_);
  if (absl::Status s = EnsureOpen(); !s.ok()) return s;
  return Opened{store_.get(), writer_.get()};
}

namespace {
// Not found is "no snapshot", not an error.
template <typename T>
absl::StatusOr<std::optional<T>> Optional(absl::StatusOr<T> r) {
  if (absl::IsNotFound(r.status())) return std::optional<T>();
  if (!r.ok()) return r.status();
  return std::optional<T>(*std::move(r));
}
}  // namespace

absl::Status CheckpointService::SnapshotAsync(
    const std::string& key, int64_t step, Pieces pieces,
    std::function<void(const checkpoint::SnapshotInfo&)> on_committed) {
  absl::StatusOr<Opened> opened = Open();
  if (!opened.ok()) return opened.status();
  checkpoint::SubmitOptions submit;
  submit.on_done = [done = std::move(on_committed)](const absl::StatusOr<checkpoint::SnapshotInfo>& r) {
    if (r.ok() && done) done(*r);
  };
  return opened->writer->Submit(key, step, "", pieces, std::move(submit)).status();
}

absl::StatusOr<checkpoint::SnapshotInfo> CheckpointService::SnapshotNow(const std::string& key, int64_t step,
                                                                        Pieces pieces, absl::Time deadline) {
  absl::StatusOr<Opened> opened = Open();
  if (!opened.ok()) return opened.status();
  checkpoint::SubmitOptions submit;
  submit.wait_for_staging_until = deadline;
  absl::StatusOr<checkpoint::SnapshotFuture> f = opened->writer->Submit(key, step, "", pieces, std::move(submit));
  if (!f.ok()) return f.status();
  return f->get();
}

absl::StatusOr<std::optional<checkpoint::LoadResult>> CheckpointService::RestoreInto(
    const std::string& key, std::span<const std::span<std::byte>> buffers) {
  absl::StatusOr<Opened> opened = Open();
  if (!opened.ok()) return opened.status();
  (void)opened->writer->Flush(key);  // a snapshot still being written is the newest
  return Optional(opened->store->LoadInto(key, buffers));
}

absl::StatusOr<std::optional<checkpoint::LoadedSnapshot>> CheckpointService::Restore(const std::string& key) {
  absl::StatusOr<Opened> opened = Open();
  if (!opened.ok()) return opened.status();
  (void)opened->writer->Flush(key);
  return Optional(opened->store->Load(key));
}

void CheckpointService::Forget(const std::string& key) {
  Opened opened;
  {
    MutexLock lock(&mu_);
    if (store_ == nullptr) return;  // never opened: nothing to forget
    opened = Opened{store_.get(), writer_.get()};
  }
  (void)opened.writer->Flush(key);
  (void)opened.store->Remove(key);
}

}  // namespace gpupool::runtime
