#include "checkpoint/task_key.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpupool::checkpoint {
namespace {

absl::Status Invalid(absl::string_view key, absl::string_view why) {
  // Cut what we echo back so a huge or binary key cannot flood a log line.
  absl::string_view shown = key.substr(0, 64);
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint task key \"", absl::CEscape(shown), key.size() > 64 ? "..." : "",
                   "\" is invalid: ", why,
                   " (a key is one directory name: 1-", kMaxTaskKeyBytes,
                   " printable ASCII bytes, no '/', '\\' or '..', not starting with '.')"));
}

}  // namespace

absl::Status ValidateTaskKey(absl::string_view key) {
  if (key.empty()) return Invalid(key, "it is empty");
  if (key.size() > kMaxTaskKeyBytes) {
    return Invalid(key, absl::StrCat("it is ", key.size(), " bytes long"));
  }
  for (char c : key) {
    if (c == '/') return Invalid(key, "it contains '/'");
    if (c == '\\') return Invalid(key, "it contains '\\'");
    if (c < 0x20 || c > 0x7e) return Invalid(key, "it contains a non-printable byte");
  }
  if (key.front() == '.') return Invalid(key, "it starts with '.'");
  if (key.find("..") != absl::string_view::npos) return Invalid(key, "it contains '..'");
  return absl::OkStatus();
}

}  // namespace gpupool::checkpoint
