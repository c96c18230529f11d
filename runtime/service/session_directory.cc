#include "runtime/service/session_directory.h"

#include <algorithm>
#include <optional>

#include "runtime/service/pool_ids.h"

namespace gpupool::runtime {

void SessionDirectory::NumberSessionsPast(const std::string& id) {
  if (std::optional<uint64_t> n = SessionNumberOf(id)) next_session_ = std::max(next_session_, *n + 1);
}

}  // namespace gpupool::runtime
