#include "pool/scheduler/lease_request.h"

namespace gpupool::pool {

absl::string_view GangTopologyName(GangTopology t) {
  switch (t) {
    case GangTopology::kAny: return "any";
    case GangTopology::kSameNode: return "same-node";
    case GangTopology::kSameNvLinkIsland: return "same-nvlink-island";
  }
  return "unknown";
}

}  // namespace gpupool::pool
