#include "checkpoint/directory_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/errno_status.h"

namespace gpupool::checkpoint {
namespace {

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(std::span<const std::byte> data) override {
    while (!data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_, errno);
      }
      data = data.subspan(static_cast<size_t>(n));
      written_ += static_cast<uint64_t>(n);
    }
    // Start writeback of what is written so far without waiting for it, so the device works
    // while later pieces are still being copied in, and the final fsync has little left to do
    // (RocksDB's bytes_per_sync). Also keeps a large snapshot from piling up dirty pages that
    // the kernel would otherwise flush all at once. Advisory: errors surface at fsync.
    if (written_ - started_ >= kWritebackChunk) {
      ::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(written_ - started_),
                        SYNC_FILE_RANGE_WRITE);
      started_ = written_;
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return ErrnoStatus("fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoStatus("close", path_, errno);
    return absl::OkStatus();
  }

 private:
  static constexpr uint64_t kWritebackChunk = 8 << 20;
  int fd_;
  const std::string path_;
  uint64_t written_ = 0;  // bytes appended
  uint64_t started_ = 0;  // bytes whose writeback has been started
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixReadableFile() override { ::close(fd_); }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("fstat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  absl::Status ReadAt(uint64_t offset, std::span<std::byte> out) override {
    while (!out.empty()) {
      ssize_t n = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("pread", path_, errno);
      }
      if (n == 0) {
        return absl::OutOfRangeError(
            absl::StrCat("pread(", path_, "): file ends at offset ", offset));
      }
      out = out.subspan(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const std::string path_;
};

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  std::string name(host);
  // A '.' in a host name would be ambiguous inside "<host>.<pid>.<n>".
  for (char& c : name) {
    if (c == '.' || c == '/') c = '_';
  }
  return name;
}

bool PidIsGone(int64_t pid) {
  if (pid <= 0 || pid == ::getpid()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

class DirectoryBackend final : public Backend {
 public:
  DirectoryBackend(DirectoryBackendOptions options, bool shared)
      : options_(std::move(options)), shared_(shared), host_(HostName()) {}

  std::string Describe() const override {
    return absl::StrCat(shared_ ? "shared" : "local", " directory ", options_.root);
  }

  std::string FullPath(const std::string& path) const override {
    return path.empty() ? options_.root : absl::StrCat(options_.root, "/", path);
  }

  absl::Status CreateDir(const std::string& path) override {
    const std::string full = FullPath(path);
    // The job's user only: snapshots hold a task's state (weights, data) and no other tenant of
    // the machine or the shared directory may read them.
    if (::mkdir(full.c_str(), 0700) != 0) {
      if (errno != EEXIST) return ErrnoStatus("mkdir", full, errno);
      struct stat st;
      if (::stat(full.c_str(), &st) != 0) return ErrnoStatus("stat", full, errno);
      if (!S_ISDIR(st.st_mode)) {
        return absl::FailedPreconditionError(absl::StrCat(full, " exists and is not a directory"));
      }
      return absl::OkStatus();
    }
    std::string parent = std::filesystem::path(path).parent_path().string();
    return SyncDir(parent);
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    const std::string full = FullPath(path);
    DIR* dir = ::opendir(full.c_str());
    if (dir == nullptr) return ErrnoStatus("opendir", full, errno);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* entry = ::readdir(dir)) {
      absl::string_view name(entry->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
    int err = errno;
    ::closedir(dir);
    if (err != 0) return ErrnoStatus("readdir", full, err);
    return names;
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    std::string full = FullPath(path);
    int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);  // see CreateDir
    if (fd < 0) return ErrnoStatus("open", full, errno);
    return std::make_unique<PosixWritableFile>(fd, std::move(full));
  }

  absl::StatusOr<std::unique_ptr<ReadableFile>> NewReadableFile(const std::string& path) override {
    std::string full = FullPath(path);
    int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", full, errno);
    return std::make_unique<PosixReadableFile>(fd, std::move(full));
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    const std::string full_from = FullPath(from), full_to = FullPath(to);
    if (::rename(full_from.c_str(), full_to.c_str()) != 0) {
      return ErrnoStatus("rename", absl::StrCat(full_from, " -> ", full_to), errno);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    const std::string full = FullPath(path);
    int fd = ::open(full.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", full, errno);
    int r = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (r != 0 && !(shared_ && err == EINVAL)) return ErrnoStatus("fsync", full, err);
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    const std::string full = FullPath(path);
    if (::unlink(full.c_str()) != 0) return ErrnoStatus("unlink", full, errno);
    return absl::OkStatus();
  }

  absl::Status RemoveDir(const std::string& path) override {
    const std::string full = FullPath(path);
    if (::rmdir(full.c_str()) != 0) return ErrnoStatus("rmdir", full, errno);
    return absl::OkStatus();
  }

  std::string TempSuffix() override {
    uint64_t n = counter_.fetch_add(1, std::memory_order_relaxed);
    if (shared_) return absl::StrCat(kTempMarker, host_, ".", ::getpid(), ".", n);
    return absl::StrCat(kTempMarker, ::getpid(), ".", n);
  }

  bool IsAbandonedTemp(const std::string& dir, const std::string& name) override {
    size_t at = name.find(kTempMarker);
    if (at == std::string::npos) return false;
    std::vector<std::string> parts =
        absl::StrSplit(name.substr(at + sizeof(kTempMarker) - 1), '.');
    // Local: <pid>.<n>; shared: <host>.<pid>.<n>.
    if (!shared_) {
      int64_t pid;
      return parts.size() == 2 && absl::SimpleAtoi(parts[0], &pid) && PidIsGone(pid);
    }
    int64_t pid;
    if (parts.size() == 3 && parts[0] == host_ && absl::SimpleAtoi(parts[1], &pid)) {
      return PidIsGone(pid);
    }
    struct stat st;
    const std::string full = FullPath(dir.empty() ? name : absl::StrCat(dir, "/", name));
    if (::stat(full.c_str(), &st) != 0) return false;
    return absl::Now() - absl::FromUnixSeconds(st.st_mtime) > options_.foreign_temp_age;
  }

 private:
  const DirectoryBackendOptions options_;
  const bool shared_;
  const std::string host_;
  std::atomic<uint64_t> counter_{0};
};

absl::StatusOr<std::unique_ptr<Backend>> NewDirectoryBackend(DirectoryBackendOptions options,
                                                             bool shared) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("checkpoint directory is empty: give a directory path");
  }
  while (options.root.size() > 1 && options.root.back() == '/') options.root.pop_back();
  std::error_code ec;
  auto status = std::filesystem::status(options.root, ec);
  if (!std::filesystem::exists(status)) {
    if (!options.create_if_missing) {
      return absl::NotFoundError(absl::StrCat("checkpoint directory ", options.root,
                                              " does not exist (create_if_missing is off)"));
    }
    std::filesystem::create_directories(options.root, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot create checkpoint directory ", options.root, ": ", ec.message()));
    }
  } else if (!std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory ", options.root, " exists but is not a directory"));
  }
  if (::access(options.root.c_str(), W_OK | X_OK) != 0) {
    return ErrnoStatus("access(W_OK) of checkpoint directory", options.root, errno);
  }
  return std::make_unique<DirectoryBackend>(std::move(options), shared);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewLocalDirectoryBackend(DirectoryBackendOptions options) {
  return NewDirectoryBackend(std::move(options), /*shared=*/false);
}

absl::StatusOr<std::unique_ptr<Backend>> NewSharedDirectoryBackend(
    DirectoryBackendOptions options) {
  return NewDirectoryBackend(std::move(options), /*shared=*/true);
}

}  // namespace gpupool::checkpoint
