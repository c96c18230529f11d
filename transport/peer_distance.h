// File: transport/peer_distance.h
//
// Where a job's processes run, and how far apart that puts them, for choosing which copy of an
// object to fetch: the nearest one a transport reaches fastest. Distance follows the path bytes
// take (DESIGN.md, "Path choice"):
//
//   0  same host: shared memory (UCX's sysv/posix/cma transports), CUDA IPC between GPUs
//   1  another host in the same rack (the node label "rack"): one switch away
//   2  anywhere else on the network (or a place nobody described)
//
//   std::vector<PeerPlace> places = {{"a", "r1"}, {"b", "r1"}, {"c", "r2"}};
//   NearestFirst(places, /*here=*/1, {2, 0});   // {0, 2}: rank 0 shares rank 1's rack
//
// Pure functions; thread-safe.
#ifndef GPUPOOL_TRANSPORT_PEER_DISTANCE_H_
#define GPUPOOL_TRANSPORT_PEER_DISTANCE_H_

#include <string>
#include <vector>

namespace gpupool::transport {

struct PeerPlace {
  std::string host;  // the machine (MPI's processor name); "" when unknown
  std::string rack;  // the node's "rack" label; "" when it has none
};

// 0, 1 or 2 as above; 2 when either place is unknown.
int Distance(const PeerPlace& a, const PeerPlace& b);

// `sources` (peer indices into `places`) ordered nearest to `here` first; among equally near ones
// the given order is kept (callers list the owner first). Indices outside `places` count as far.
std::vector<int> NearestFirst(const std::vector<PeerPlace>& places, int here, std::vector<int> sources);

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_PEER_DISTANCE_H_
