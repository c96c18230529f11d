#include "checkpoint/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace gpupool::checkpoint {

absl::Status ErrnoStatus(absl::string_view call, absl::string_view path, int err) {
  std::string message = absl::StrCat(call, "(", path, "): ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT: return absl::ResourceExhaustedError(message);
    case ENOENT: return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS: return absl::PermissionDeniedError(message);
    case ENOTDIR: return absl::FailedPreconditionError(message);
    default: return absl::InternalError(message);
  }
}

}  // namespace gpupool::checkpoint
