#include "runtime/cli/pool_json.h"

#include <vector>

namespace gpupool::cli {
namespace {

// The JSON converter: every field gpupool::ForEachField lists, under its name. Python's
// describe_pool() walks the same list (python/pool_bindings.cc), so the two cannot differ.
template <typename Record>
nlohmann::json RecordToJson(const Record& record);

template <typename T>
nlohmann::json ValueToJson(const T& value) {
  if constexpr (kIsRecordList<T>) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& record : value) out.push_back(RecordToJson(record));
    return out;
  } else {
    return nlohmann::json(value);
  }
}

template <typename Record>
nlohmann::json RecordToJson(const Record& record) {
  nlohmann::json out = nlohmann::json::object();
  ForEachField(record, [&](const char* name, const auto& value) { out[name] = ValueToJson(value); });
  return out;
}

}  // namespace

nlohmann::json PoolToJson(const PoolDescription& pool) { return RecordToJson(pool); }

}  // namespace gpupool::cli
