// File: pool/config/config_reader.h
//
// Reads typed values out of a YAML tree while keeping what an error message needs: the file, the
// line and column of the offending node, and the field's path ("teams[1].quotas[0].nominal").
// Every section reader of the pool's configuration goes through it, so every invalid field is
// reported the same way:
//
//   pool.yaml:12:18: teams[1].quotas[0].nominal: -2 is negative
//
// yaml-cpp stays inside pool/config/: nothing here leaks YAML types beyond the section readers.
#ifndef GPUPOOL_POOL_CONFIG_CONFIG_READER_H_
#define GPUPOOL_POOL_CONFIG_CONFIG_READER_H_

#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace gpupool::pool {

class ConfigReader {
 public:
  explicit ConfigReader(absl::string_view source) : source_(source) {}

  // InvalidArgument "SOURCE:LINE:COL: PATH: WHAT".
  absl::Status Error(const YAML::Node& at, absl::string_view path, absl::string_view what) const;

  // `map` must be a mapping whose keys are all in `allowed`.
  absl::Status CheckKeys(const YAML::Node& map, absl::string_view path,
                         const std::set<std::string>& allowed) const;

  absl::StatusOr<std::string> String(const YAML::Node& n, absl::string_view path) const;
  absl::StatusOr<int> Int(const YAML::Node& n, absl::string_view path, int lo, int hi) const;
  absl::StatusOr<double> Double(const YAML::Node& n, absl::string_view path) const;
  absl::StatusOr<bool> Bool(const YAML::Node& n, absl::string_view path) const;
  absl::StatusOr<std::map<std::string, std::string>> Labels(const YAML::Node& n,
                                                            absl::string_view path) const;
  absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& n,
                                                      absl::string_view path) const;

 private:
  std::string source_;
};

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_CONFIG_CONFIG_READER_H_
