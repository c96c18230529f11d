#include "checkpoint/manifest.h"

#include <cinttypes>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "checkpoint/checksum.h"

namespace gpupool::checkpoint {
namespace {

constexpr absl::string_view kFirstLine = "gpupool-checkpoint-manifest 1";

uint64_t Hash(absl::string_view text) {
  return Checksum64(std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace

std::string SnapshotFileName(uint64_t version) {
  return absl::StrFormat("snap-%020d.ckpt", version);
}

std::optional<uint64_t> ParseSnapshotFileName(absl::string_view name) {
  constexpr absl::string_view kPrefix = "snap-", kSuffix = ".ckpt";
  if (name.size() != kPrefix.size() + 20 + kSuffix.size() || !absl::StartsWith(name, kPrefix) ||
      !absl::EndsWith(name, kSuffix)) {
    return std::nullopt;
  }
  uint64_t version;
  absl::string_view digits = name.substr(kPrefix.size(), 20);
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (!absl::SimpleAtoi(digits, &version)) return std::nullopt;
  return version;
}

std::string EncodeManifest(absl::string_view task, const std::vector<ManifestEntry>& newest_first) {
  std::string text = absl::StrCat(kFirstLine, "\ntask ", task, "\n");
  for (const ManifestEntry& e : newest_first) {
    absl::StrAppendFormat(&text, "snapshot %d %d %d %016x %s\n", e.version, e.step, e.payload_bytes,
                          e.checksum, e.file);
  }
  absl::StrAppendFormat(&text, "end %016x\n", Hash(text));
  return text;
}

absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(absl::string_view text,
                                                         absl::string_view task,
                                                         absl::string_view path) {
  auto damaged = [path](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("manifest ", path, " is damaged: ", why));
  };
  size_t end_at = text.rfind("end ");
  if (end_at == absl::string_view::npos || (end_at != 0 && text[end_at - 1] != '\n')) {
    return damaged("no end line (truncated)");
  }
  uint64_t claimed;
  absl::string_view end_line = absl::StripSuffix(text.substr(end_at + 4), "\n");
  if (!absl::SimpleHexAtoi(end_line, &claimed)) return damaged("unreadable end line");
  if (Hash(text.substr(0, end_at)) != claimed) return damaged("checksum mismatch");

  std::vector<absl::string_view> lines =
      absl::StrSplit(text.substr(0, end_at), '\n', absl::SkipEmpty());
  if (lines.size() < 2 || lines[0] != kFirstLine) return damaged("unknown format");
  if (lines[1] != absl::StrCat("task ", task)) {
    return damaged(absl::StrCat("it belongs to another task (\"", lines[1], "\")"));
  }
  std::vector<ManifestEntry> entries;
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    ManifestEntry e;
    if (f.size() != 6 || f[0] != "snapshot" || !absl::SimpleAtoi(f[1], &e.version) ||
        !absl::SimpleAtoi(f[2], &e.step) || !absl::SimpleAtoi(f[3], &e.payload_bytes) ||
        !absl::SimpleHexAtoi(f[4], &e.checksum) || ParseSnapshotFileName(f[5]) != e.version) {
      return damaged(absl::StrCat("unreadable line ", i + 1, ": \"", lines[i], "\""));
    }
    e.file = std::string(f[5]);
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace gpupool::checkpoint
