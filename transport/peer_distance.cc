#include "transport/peer_distance.h"

#include <algorithm>

namespace gpupool::transport {

int Distance(const PeerPlace& a, const PeerPlace& b) {
  if (a.host.empty() || b.host.empty()) return 2;
  if (a.host == b.host) return 0;
  if (!a.rack.empty() && a.rack == b.rack) return 1;
  return 2;
}

std::vector<int> NearestFirst(const std::vector<PeerPlace>& places, int here, std::vector<int> sources) {
  const auto known = [&](int r) { return r >= 0 && r < static_cast<int>(places.size()); };
  if (!known(here)) return sources;
  const auto distance = [&](int r) { return known(r) ? Distance(places[here], places[r]) : 2; };
  std::stable_sort(sources.begin(), sources.end(), [&](int a, int b) { return distance(a) < distance(b); });
  return sources;
}

}  // namespace gpupool::transport
