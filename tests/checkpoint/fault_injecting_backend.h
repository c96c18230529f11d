// File: tests/checkpoint/fault_injecting_backend.h
//
// Wraps a real Backend and makes chosen operations fail the way a full disk or a failing device
// does, so each step of a commit can be broken on purpose (LevelDB's fault_injection_test idea).
#ifndef GPUPOOL_TESTS_CHECKPOINT_FAULT_INJECTING_BACKEND_H_
#define GPUPOOL_TESTS_CHECKPOINT_FAULT_INJECTING_BACKEND_H_

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
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

  // A gate that holds every Append until opened, so a test can keep a write "in flight".
  void CloseGate() {
    std::lock_guard<std::mutex> lock(mu);
    gate_closed = true;
  }
  void OpenGate() {
    std::lock_guard<std::mutex> lock(mu);
    gate_closed = false;
    cv.notify_all();
  }
  void WaitUntilBlocked(int writers) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return blocked >= writers; });
  }
  void PassGate() {
    std::unique_lock<std::mutex> lock(mu);
    ++blocked;
    cv.notify_all();
    cv.wait(lock, [&] { return !gate_closed; });
    --blocked;
  }
  // Snapshot files open for writing per task directory, now and at most, to prove that a task
  // never has two writers.
  void Opened(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu);
    int now = ++open_writers[dir];
    if (now > max_open_writers[dir]) max_open_writers[dir] = now;
  }
  void Closed(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu);
    --open_writers[dir];
  }
  int MaxWriters(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu);
    return max_open_writers[dir];
  }

  std::mutex mu;
  std::condition_variable cv;
  bool gate_closed = false;
  int blocked = 0;
  std::map<std::string, int> open_writers, max_open_writers;
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
    std::string dir = p.substr(0, p.rfind('/'));
    return std::unique_ptr<WritableFile>(new File(std::move(*file), faults_, FullPath(p), dir));
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
    File(std::unique_ptr<WritableFile> base, Faults* faults, std::string path, std::string dir)
        : base_(std::move(base)), faults_(faults), path_(std::move(path)), dir_(std::move(dir)) {
      faults_->Opened(dir_);
    }
    ~File() override {
      if (!closed_) faults_->Closed(dir_);
    }
    absl::Status Append(std::span<const std::byte> data) override {
      faults_->PassGate();
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
    absl::Status Close() override {
      closed_ = true;
      faults_->Closed(dir_);
      return base_->Close();
    }

   private:
    std::unique_ptr<WritableFile> base_;
    Faults* faults_;
    std::string path_;
    std::string dir_;
    bool closed_ = false;
  };

  std::unique_ptr<Backend> base_;
  Faults* faults_;
};

}  // namespace gpupool::checkpoint::testing

#endif  // GPUPOOL_TESTS_CHECKPOINT_FAULT_INJECTING_BACKEND_H_
