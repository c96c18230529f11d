#include "runtime/objects/lineage.h"

#include <cstdint>

#include "gpupool/codec.h"
#include "gpupool/error.h"

namespace gpupool::runtime {

namespace {
constexpr uint8_t kVersion = 2;  // bumped when the layout below changes
}  // namespace

std::string EncodeLineage(const Lineage& l) {
  std::string out;
  Writer w(out);
  const TaskOptions& o = l.options;
  Encode(w, kVersion);
  Encode(w, l.function);
  Encode(w, l.args);
  Encode(w, o.gpus);
  Encode(w, o.gpu_memory_mib);
  Encode(w, o.models);
  Encode(w, o.labels);
  Encode(w, o.avoid_labels);
  Encode(w, static_cast<uint8_t>(o.hardware_isolation));
  Encode(w, o.team);
  Encode(w, o.project);
  Encode(w, o.workload_class);
  Encode(w, o.priority_class);
  Encode(w, static_cast<int32_t>(o.max_retries));
  Encode(w, o.name);
  Encode(w, l.checkpoint_key);
  return out;
}

Lineage DecodeLineage(std::string_view bytes) {
  Reader r(bytes);
  if (Decode<uint8_t>(r) != kVersion) throw Error(ErrorCode::kDataLoss, "an object's lineage has an unknown layout");
  Lineage l;
  TaskOptions& o = l.options;
  l.function = Decode<std::string>(r);
  l.args = Decode<std::string>(r);
  o.gpus = Decode<double>(r);
  o.gpu_memory_mib = Decode<int64_t>(r);
  o.models = Decode<std::vector<std::string>>(r);
  o.labels = Decode<std::map<std::string, std::string>>(r);
  o.avoid_labels = Decode<std::map<std::string, std::string>>(r);
  o.hardware_isolation = Decode<uint8_t>(r) != 0;
  o.team = Decode<std::string>(r);
  o.project = Decode<std::string>(r);
  o.workload_class = Decode<std::string>(r);
  o.priority_class = Decode<std::string>(r);
  o.max_retries = Decode<int32_t>(r);
  o.name = Decode<std::string>(r);
  l.checkpoint_key = Decode<std::string>(r);
  if (r.remaining() != 0) throw Error(ErrorCode::kDataLoss, "an object's lineage has trailing bytes");
  return l;
}

}  // namespace gpupool::runtime
