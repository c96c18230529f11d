// File: runtime/service/pool_ids.h
//
// How the pool service names a job's requests and leases. A job names its own requests; the
// service prefixes them with its session's number, "s<N>/<the job's id>", so that jobs cannot
// collide or name each other's requests, and a lease is "<request id>#<n>". A request a job
// reclaims after a restart keeps the id it had, so one session may hold ids of several prefixes;
// the job's own id is always what follows the first '/'.
//
//   SessionPrefix(3)                 // "s3/"
//   ClientIdOf("s3/train-7")         // "train-7"
//   SessionNumberOf("s3/train-7#1")  // 3
#ifndef GPUPOOL_RUNTIME_SERVICE_POOL_IDS_H_
#define GPUPOOL_RUNTIME_SERVICE_POOL_IDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpupool::runtime {

inline std::string SessionPrefix(uint64_t session) { return absl::StrCat("s", session, "/"); }

// The job's own id in a pool request id; nullopt for an id without a session prefix.
inline std::optional<absl::string_view> ClientIdOf(absl::string_view pool_id) {
  size_t slash = pool_id.find('/');
  if (slash == absl::string_view::npos) return std::nullopt;
  return pool_id.substr(slash + 1);
}

// N of a request or lease id "s<N>/..."; nullopt when it has no such prefix.
inline std::optional<uint64_t> SessionNumberOf(absl::string_view id) {
  size_t slash = id.find('/');
  uint64_t n = 0;
  if (slash == absl::string_view::npos || id.rfind('s', 0) != 0 || !absl::SimpleAtoi(id.substr(1, slash - 1), &n)) {
    return std::nullopt;
  }
  return n;
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SERVICE_POOL_IDS_H_
