#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/errno_status.h"

namespace gpupool::checkpoint {
namespace {

// Closes the descriptor on every path out of WriteFileDurably.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // close() can report a deferred write error (NFS); callers that care use this.
  int Close() {
    int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, std::span<const std::byte> data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path, errno);
    }
    data = data.subspan(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileDurably(const std::string& path, std::span<const std::byte> data) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());

  FileDescriptor file(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (file.get() < 0) return ErrnoStatus("open", tmp, errno);
  absl::Status written = WriteAll(file.get(), data, tmp);
  if (written.ok() && ::fsync(file.get()) != 0) written = ErrnoStatus("fsync", tmp, errno);
  if (written.ok() && file.Close() != 0) written = ErrnoStatus("close", tmp, errno);
  if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    written = ErrnoStatus("rename", path, errno);
  }
  if (!written.ok()) {
    ::unlink(tmp.c_str());  // the old file, if any, is untouched
    return written;
  }
  FileDescriptor directory(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory.get() < 0) return ErrnoStatus("open", dir.string(), errno);
  if (::fsync(directory.get()) != 0) return ErrnoStatus("fsync", dir.string(), errno);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) return ErrnoStatus("open", path, errno);
  std::string out;
  char buffer[1 << 16];
  while (true) {
    ssize_t n = ::read(file.get(), buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path, errno);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace gpupool::checkpoint
