#include "pool/placement/model_set.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpupool::pool::placement {

absl::StatusOr<int> ModelIndex::Intern(std::string_view label) {
  if (label.empty()) return absl::InvalidArgumentError("empty GPU model label");
  if (auto it = ids_.find(std::string(label)); it != ids_.end()) return it->second;
  if (size() >= kMaxModels) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxModels, " distinct GPU models (at '", std::string(label), "')"));
  }
  const int id = size();
  labels_.emplace_back(label);
  ids_.emplace(std::string(label), id);
  return id;
}

std::optional<int> ModelIndex::Find(std::string_view label) const {
  if (auto it = ids_.find(std::string(label)); it != ids_.end()) return it->second;
  return std::nullopt;
}

ModelSet ModelIndex::ResolveSpec(std::string_view spec) const {
  ModelSet set;
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find('|', begin);
    if (end == std::string_view::npos) end = spec.size();
    if (end > begin) {
      set.any = false;
      if (auto id = Find(spec.substr(begin, end - begin))) set.mask |= uint64_t{1} << *id;
    }
    begin = end + 1;
  }
  return set;
}

}  // namespace gpupool::pool::placement
