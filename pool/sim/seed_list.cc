#include "pool/sim/seed_list.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpupool::pool::sim {
namespace {

// Digits only, at most 18 of them (no overflow, no sign, no spaces).
bool ParseSeed(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  *out = v;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> ParseSeedList(std::string_view text) {
  std::vector<uint64_t> seeds;
  if (text.empty()) return absl::InvalidArgumentError("empty seed list (expected A-B or A,B,...)");
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string part(text.substr(begin, end - begin));
    begin = end + 1;
    const size_t dash = part.find('-');
    const std::string_view p = part;
    uint64_t first = 0;
    uint64_t last = 0;
    const bool ok = dash == std::string_view::npos
                        ? ParseSeed(p, &first) && ParseSeed(p, &last)
                        : ParseSeed(p.substr(0, dash), &first) && ParseSeed(p.substr(dash + 1), &last);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad seed '", part, "' in '", std::string(text), "' (expected A-B or A,B,...)"));
    }
    if (last < first) {
      return absl::InvalidArgumentError(absl::StrCat("empty seed range '", part, "'"));
    }
    if (last - first >= static_cast<uint64_t>(kMaxSeeds) ||
        seeds.size() + (last - first + 1) > static_cast<size_t>(kMaxSeeds)) {
      return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxSeeds, " seeds in '", std::string(text), "'"));
    }
    for (uint64_t s = first; s <= last; ++s) seeds.push_back(s);
  }
  return seeds;
}

}  // namespace gpupool::pool::sim
