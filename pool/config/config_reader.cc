#include "pool/config/config_reader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpupool::pool {

absl::Status ConfigReader::Error(const YAML::Node& at, absl::string_view path,
                                 absl::string_view what) const {
  YAML::Mark mark = at.Mark();
  std::string where = mark.is_null()
                          ? source_
                          : absl::StrCat(source_, ":", mark.line + 1, ":", mark.column + 1);
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", path, ": ", what));
}

absl::Status ConfigReader::CheckKeys(const YAML::Node& map, absl::string_view path,
                                     const std::set<std::string>& allowed) const {
  if (!map.IsMap()) return Error(map, path, "must be a mapping");
  for (const auto& kv : map) {
    std::string key = kv.first.as<std::string>();
    if (!allowed.contains(key)) {
      return Error(kv.first, path,
                   absl::StrCat("unknown key '", key, "' (allowed: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ConfigReader::String(const YAML::Node& n, absl::string_view path) const {
  if (!n.IsScalar()) return Error(n, path, "must be a string");
  return n.as<std::string>();
}

absl::StatusOr<int> ConfigReader::Int(const YAML::Node& n, absl::string_view path, int lo,
                                      int hi) const {
  int value = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, value)) {
    return Error(n, path, "must be an integer");
  }
  if (value < lo || value > hi) return Error(n, path, absl::StrCat(value, " is outside ", lo, "..", hi));
  return value;
}

absl::StatusOr<double> ConfigReader::Double(const YAML::Node& n, absl::string_view path) const {
  double value = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, value)) {
    return Error(n, path, "must be a number");
  }
  return value;
}

absl::StatusOr<bool> ConfigReader::Bool(const YAML::Node& n, absl::string_view path) const {
  bool value = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, value)) {
    return Error(n, path, "must be true or false");
  }
  return value;
}

absl::StatusOr<std::map<std::string, std::string>> ConfigReader::Labels(
    const YAML::Node& n, absl::string_view path) const {
  if (!n.IsMap()) return Error(n, path, "must be a mapping of label names to values");
  std::map<std::string, std::string> labels;
  for (const auto& kv : n) {
    std::string key = kv.first.as<std::string>();
    if (!kv.second.IsScalar()) return Error(kv.second, absl::StrCat(path, ".", key), "must be a string");
    labels[key] = kv.second.as<std::string>();
  }
  return labels;
}

absl::StatusOr<std::vector<std::string>> ConfigReader::StringList(const YAML::Node& n,
                                                                  absl::string_view path) const {
  if (!n.IsSequence()) return Error(n, path, "must be a list");
  std::vector<std::string> out;
  for (size_t i = 0; i < n.size(); ++i) {
    absl::StatusOr<std::string> s = String(n[i], absl::StrCat(path, "[", i, "]"));
    if (!s.ok()) return s.status();
    out.push_back(*s);
  }
  return out;
}

}  // namespace gpupool::pool
