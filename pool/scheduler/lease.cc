#include "pool/scheduler/lease.h"

namespace gpupool::pool {

absl::string_view RevokeCauseName(RevokeCause cause) {
  switch (cause) {
    case RevokeCause::kReclaim: return "reclaim";
    case RevokeCause::kPriority: return "priority";
    case RevokeCause::kDrain: return "drain";
    case RevokeCause::kMove: return "move";
  }
  return "unknown";
}

}  // namespace gpupool::pool
