#include "runtime/objects/lineage.h"

#include <cstdint>

#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "gpupool/internal/task_options_codec.h"

namespace gpupool::runtime {

namespace {
// Bumped when the layout below changes; a row added to GPUPOOL_TASK_OPTIONS changes it too, but
// lineage only crosses the ranks of one job, which run one binary.
constexpr uint8_t kVersion = 3;  // 3: the cpus and host_memory_mib options
}  // namespace

std::string EncodeLineage(const Lineage& l) {
  std::string out;
  Writer w(out);
  Encode(w, kVersion);
  Encode(w, l.function);
  Encode(w, l.args);
  Encode(w, l.options);  // every option, in GPUPOOL_TASK_OPTIONS' order
  Encode(w, l.checkpoint_key);
  return out;
}

Lineage DecodeLineage(std::string_view bytes) {
  Reader r(bytes);
  if (Decode<uint8_t>(r) != kVersion) throw Error(ErrorCode::kDataLoss, "an object's lineage has an unknown layout");
  Lineage l;
  l.function = Decode<std::string>(r);
  l.args = Decode<std::string>(r);
  l.options = Decode<TaskOptions>(r);
  l.checkpoint_key = Decode<std::string>(r);
  if (r.remaining() != 0) throw Error(ErrorCode::kDataLoss, "an object's lineage has trailing bytes");
  return l;
}

}  // namespace gpupool::runtime
