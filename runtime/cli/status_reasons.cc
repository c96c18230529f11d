#include "runtime/cli/status_reasons.h"

#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/cli/text_table.h"

namespace gpupool::cli {
namespace {

// Unix seconds as the local "2026-11-27T05:14:25", as sinfo -R prints its TIMESTAMP.
std::string Timestamp(double unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm local{};
  localtime_r(&t, &local);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%S", &local);
  return out;
}

}  // namespace

void PrintHealthReasons(const nlohmann::json& report, bool as_json) {
  using nlohmann::json;
  json rows = json::array();
  for (const json& node : report["nodes"]) {
    for (const json& gpu : node["gpus"]) {
      if (gpu["health"] == "healthy" && gpu.value("drained_by", json()).is_null()) continue;
      rows.push_back({{"gpu", absl::StrCat(node["name"].get<std::string>(), "/", gpu["index"].get<int>())},
                      {"health", gpu["health"]},
                      {"reasons", gpu.value("health_reasons", json::array())},
                      {"since_s", gpu.value("health_since_s", json())},
                      {"drained_by", gpu.value("drained_by", json())},
                      {"drain_reason", gpu.value("drain_reason", json())},
                      {"last_diagnostic_s", gpu.value("last_diagnostic_s", json())},
                      {"last_diagnostic_result", gpu.value("last_diagnostic_result", json())}});
    }
  }
  if (as_json) {
    std::cout << rows.dump(2) << "\n";
    return;
  }
  TextTable table({"GPU", "STATE", "SINCE", "BY", "LAST DIAGNOSTIC", "REASON"});
  for (const json& r : rows) {
    std::vector<std::string> reasons;
    for (const json& why : r["reasons"]) reasons.push_back(why.get<std::string>());
    const json& by = r["drained_by"];
    const json& diag = r["last_diagnostic_result"];
    table.AddRow({r["gpu"], r["health"], r["since_s"].is_number() ? Timestamp(r["since_s"].get<double>()) : "-",
                  by.is_string() ? by.get<std::string>() : "-",
                  diag.is_string() ? absl::StrCat(diag.get<std::string>(), " ",
                                                  Timestamp(r["last_diagnostic_s"].get<double>()))
                                   : "-",
                  reasons.empty() ? "-" : absl::StrJoin(reasons, "; ")});
  }
  std::cout << table.Render();
  std::cout << rows.size() << " GPUs not healthy or drained by an operator\n";
}

}  // namespace gpupool::cli
