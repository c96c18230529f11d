#include "pool/sim/packing_ceiling.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "pool/placement/pod_request.h"
#include "pool/placement/random_stream.h"
#include "pool/sim/workload.h"

namespace gpupool::pool::sim {

namespace {

constexpr int kBin = placement::kMilliPerGpu;

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

int64_t FirstFitDecreasingBins(std::vector<int> sizes_milli) {
  std::sort(sizes_milli.begin(), sizes_milli.end(), std::greater<>());
  std::vector<int> room;  // free milli of each open bin, in the order they were opened
  for (int s : sizes_milli) {
    auto it = std::find_if(room.begin(), room.end(), [s](int r) { return r >= s; });
    if (it == room.end()) {
      room.push_back(kBin - s);
    } else {
      *it -= s;
    }
  }
  return static_cast<int64_t>(room.size());
}

// Martello and Toth (1990), bound L2: for a threshold a <= C/2, items bigger than C - a each need
// a bin of their own that nothing else of size >= a fits into; items in (C/2, C - a] each need a
// bin too, whose room may take items in [a, C/2]; what of the latter does not fit into that room
// needs ceil(rest / C) more bins. The best threshold is among the item sizes (and 0).
int64_t BinCountLowerBound(std::span<const int> sizes_milli) {
  std::vector<int> sizes(sizes_milli.begin(), sizes_milli.end());
  std::sort(sizes.begin(), sizes.end());
  std::vector<int> thresholds = {0};
  for (int s : sizes) {
    if (2 * s <= kBin && s != thresholds.back()) thresholds.push_back(s);
  }
  int64_t best = 0;
  for (int a : thresholds) {
    int64_t own = 0, big = 0, big_milli = 0, small_milli = 0;
    for (int s : sizes) {
      if (s > kBin - a) {
        ++own;
      } else if (2 * s > kBin) {
        ++big;
        big_milli += s;
      } else if (s >= a) {
        small_milli += s;
      }
    }
    const int64_t room_in_big = big * kBin - big_milli;
    best = std::max(best, own + big + CeilDiv(small_milli - room_in_big, kBin));
  }
  return best;
}

absl::StatusOr<PackingCeiling> EstimatePackingCeiling(std::span<const NodeCapacity> nodes,
                                                      std::span<const PodSpec> pods, double tune,
                                                      uint64_t seed, int percent) {
  if (percent < 0)
    return absl::InvalidArgumentError(absl::StrCat("percent ", percent, " is negative"));
  PackingCeiling c;
  for (const NodeCapacity& n : nodes) c.cluster_gpus += n.num_gpu;
  if (c.cluster_gpus <= 0) return absl::InvalidArgumentError("the node list has no GPUs");
  const int64_t capacity_milli = c.cluster_gpus * kBin;

  placement::RandomStream random(seed);
  const ProtocolWorkload workload = BuildProtocolWorkload(pods, capacity_milli, tune, random);
  const int64_t limit_milli = capacity_milli * percent / 100;
  std::vector<int> shares;
  for (int index : workload.arrivals) {
    const PodSpec& pod = pods[index];
    if (c.arrived_milli + pod.gpu_demand_milli() > limit_milli) break;
    c.arrived_milli += pod.gpu_demand_milli();
    if (pod.num_gpu == 1 && pod.gpu_milli < kBin) {
      shares.push_back(pod.gpu_milli);
      c.share_milli += pod.gpu_milli;
    }
  }
  c.share_pods = static_cast<int64_t>(shares.size());
  c.bins_lower_bound = BinCountLowerBound(shares);
  c.bins_ffd = FirstFitDecreasingBins(std::move(shares));

  const int64_t whole_milli = c.arrived_milli - c.share_milli;
  auto ceiling_pct = [&](int64_t bins) {
    const int64_t whole_room = std::max<int64_t>(0, c.cluster_gpus - bins) * kBin;
    return 100.0 * static_cast<double>(c.share_milli + std::min(whole_milli, whole_room)) /
           static_cast<double>(capacity_milli);
  };
  c.ceiling_pct_bound = ceiling_pct(c.bins_lower_bound);
  c.ceiling_pct_ffd = ceiling_pct(c.bins_ffd);
  return c;
}

}  // namespace gpupool::pool::sim
