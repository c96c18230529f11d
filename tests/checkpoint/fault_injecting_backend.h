// File: tests/checkpoint/fault_injecting_backend.h
//
// Wraps a real Backend and makes chosen operations fail the way a full disk or a failing device
// does, so each step of a commit can be broken on purpose (LevelDB's fault_injection_test idea).
#ifndef GPUPOOL_TESTS_CHECKPOINT_FAULT_INJECTING_BACKEND_H_
#define GPUPOOL_TESTS_CHECKPOINT_FAULT_INJECTING_BACKEND_H_

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>

#include "checkpoint/backend.h"
#include "checkpoint/errno_status.h"

namespace gpupool::checkpoint::testing {

struct Faults {
  // Appends fail with ENOSPC once this many bytes have been appended in total (after a short
  // write of what still fits, as a real full disk does). Negative: never.
  std::atomic<int64_t> enospc_after_bytes{-1};
  std::atomic<bool> fail_sync{false};
  std::atomic<bool> fail_rename{false};
  std::atomic<int64_t> appended{0};
};

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> base, Faults* faults)
      : base_(std::move(base)), faults_(faults) {}

  std::string Describe() const override { return "fault-injecting " + base_->Describe(); }
  std::string FullPath(const std::string& p) const override { return base_->FullPath(p); }
  absl::Status CreateDir(const std::string& p) override { return base_->CreateDir(p); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return base_->ListDir(p);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& p) override {
    auto file = base_->NewWritableFile(p);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(new File(std::move(*file), faults_, FullPath(p)));
  }
  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& p) override {
    return base_->NewReadableFile(p);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (faults_->fail_rename) return ErrnoStatus("rename", FullPath(to), EIO);
    return base_->Rename(from, to);
  }
  absl::Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  absl::Status RemoveFile(const std::string& p) override { return base_->RemoveFile(p); }
  absl::Status RemoveDir(const std::string& p) override { return base_->RemoveDir(p); }
  std::string TempSuffix() override { return base_->TempSuffix(); }
  bool IsAbandonedTemp(const std::string& d, const std::string& n) override {
    return base_->IsAbandonedTemp(d, n);
  }

 private:
  class File final : public WritableFile {
   public:
    File(std::unique_ptr<WritableFile> base, Faults* faults, std::string path)
        : base_(std::move(base)), faults_(faults), path_(std::move(path)) {}
    absl::Status Append(std::span<const std::byte> data) override {
      const int64_t limit = faults_->enospc_after_bytes;
      if (limit >= 0) {
        const int64_t room = std::max<int64_t>(0, limit - faults_->appended);
        if (static_cast<int64_t>(data.size()) > room) {
          if (room > 0) {
            if (auto s = base_->Append(data.first(room)); !s.ok()) return s;
            faults_->appended += room;
          }
          return ErrnoStatus("write", path_, ENOSPC);
        }
      }
      faults_->appended += static_cast<int64_t>(data.size());
      return base_->Append(data);
    }
    absl::Status Sync() override {
      if (faults_->fail_sync) return ErrnoStatus("fsync", path_, EIO);
      return base_->Sync();
    }
    absl::Status Close() override { return base_->Close(); }

   private:
    std::unique_ptr<WritableFile> base_;
    Faults* faults_;
    std::string path_;
  };

  std::unique_ptr<Backend> base_;
  Faults* faults_;
};

}  // namespace gpupool::checkpoint::testing

#endif  // GPUPOOL_TESTS_CHECKPOINT_FAULT_INJECTING_BACKEND_H_
