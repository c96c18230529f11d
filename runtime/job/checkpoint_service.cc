#include "runtime/job/checkpoint_service.h"

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/directory_backend.h"

namespace gpupool::runtime {

CheckpointService::~CheckpointService() {
  std::lock_guard<std::mutex> lock(mu_);
  if (writer_ != nullptr) (void)writer_->Shutdown();
}

absl::Status CheckpointService::EnsureOpen() {
  if (store_ != nullptr) return absl::OkStatus();
  std::string dir = options_.dir;
  if (dir.empty()) {
    const char* env = std::getenv("GPUPOOL_CHECKPOINT_DIR");
    dir = env != nullptr && *env != '\0'
              ? std::string(env)
              : (std::filesystem::temp_directory_path() / "gpupool-checkpoints").string();
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
  std::lock_guard<std::mutex> lock(mu_);
  return dir_;
}

absl::Status CheckpointService::SnapshotAsync(
    const std::string& key, int64_t step, Pieces pieces,
    std::function<void(const checkpoint::SnapshotInfo&)> on_committed) {
  checkpoint::AsyncSnapshotWriter* writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = EnsureOpen(); !s.ok()) return s;
    writer = writer_.get();
  }
  checkpoint::SubmitOptions submit;
  submit.on_done = [done = std::move(on_committed)](const absl::StatusOr<checkpoint::SnapshotInfo>& r) {
    if (r.ok() && done) done(*r);
  };
  absl::StatusOr<checkpoint::SnapshotFuture> f = writer->Submit(key, step, "", pieces, std::move(submit));
  return f.status();
}

absl::StatusOr<checkpoint::SnapshotInfo> CheckpointService::SnapshotNow(const std::string& key, int64_t step,
                                                                        Pieces pieces, absl::Time deadline) {
  checkpoint::AsyncSnapshotWriter* writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = EnsureOpen(); !s.ok()) return s;
    writer = writer_.get();
  }
  checkpoint::SubmitOptions submit;
  submit.wait_for_staging_until = deadline;
  absl::StatusOr<checkpoint::SnapshotFuture> f = writer->Submit(key, step, "", pieces, std::move(submit));
  if (!f.ok()) return f.status();
  return f->get();
}

absl::StatusOr<std::optional<checkpoint::LoadResult>> CheckpointService::RestoreInto(
    const std::string& key, std::span<const std::span<std::byte>> buffers) {
  checkpoint::SnapshotStore* store;
  checkpoint::AsyncSnapshotWriter* writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = EnsureOpen(); !s.ok()) return s;
    store = store_.get();
    writer = writer_.get();
  }
  (void)writer->Flush(key);  // a snapshot still being written is the newest
  absl::StatusOr<checkpoint::LoadResult> r = store->LoadInto(key, buffers);
  if (absl::IsNotFound(r.status())) return std::optional<checkpoint::LoadResult>();
  if (!r.ok()) return r.status();
  return std::optional<checkpoint::LoadResult>(*std::move(r));
}

absl::StatusOr<std::optional<checkpoint::LoadedSnapshot>> CheckpointService::Restore(const std::string& key) {
  checkpoint::SnapshotStore* store;
  checkpoint::AsyncSnapshotWriter* writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (absl::Status s = EnsureOpen(); !s.ok()) return s;
    store = store_.get();
    writer = writer_.get();
  }
  (void)writer->Flush(key);
  absl::StatusOr<checkpoint::LoadedSnapshot> r = store->Load(key);
  if (absl::IsNotFound(r.status())) return std::optional<checkpoint::LoadedSnapshot>();
  if (!r.ok()) return r.status();
  return std::optional<checkpoint::LoadedSnapshot>(*std::move(r));
}

void CheckpointService::Forget(const std::string& key) {
  checkpoint::SnapshotStore* store;
  checkpoint::AsyncSnapshotWriter* writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (store_ == nullptr) return;
    store = store_.get();
    writer = writer_.get();
  }
  (void)writer->Flush(key);
  (void)store->Remove(key);
}

}  // namespace gpupool::runtime
