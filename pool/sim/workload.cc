#include "pool/sim/workload.h"

namespace gpupool::pool::sim {

ProtocolWorkload BuildProtocolWorkload(std::span<const PodSpec> pods, int64_t cluster_gpu_milli,
                                       double tune, placement::RandomStream& random) {
  ProtocolWorkload w;
  w.arrivals.reserve(pods.size());
  bool any_demand = false;
  for (int i = 0; i < static_cast<int>(pods.size()); ++i) {
    w.arrivals.push_back(i);
    w.demand_milli += pods[i].gpu_demand_milli();
    any_demand = any_demand || pods[i].gpu_demand_milli() > 0;
  }
  const double target = tune * static_cast<double>(cluster_gpu_milli);
  // Without any GPU demand no number of draws can reach the target: leave the list alone.
  if (tune > 0 && any_demand) {
    if (static_cast<double>(w.demand_milli) < target) {
      for (;;) {
        const int pick = static_cast<int>(random.Below(pods.size()));
        const int64_t demand = pods[pick].gpu_demand_milli();
        if (static_cast<double>(w.demand_milli + demand) > target) break;
        w.arrivals.push_back(pick);
        w.demand_milli += demand;
        ++w.appended;
      }
    } else {
      while (static_cast<double>(w.demand_milli) > target && !w.arrivals.empty()) {
        const size_t victim = static_cast<size_t>(random.Below(w.arrivals.size()));
        w.demand_milli -= pods[w.arrivals[victim]].gpu_demand_milli();
        w.arrivals.erase(w.arrivals.begin() + static_cast<std::ptrdiff_t>(victim));
        ++w.removed;
      }
    }
  }
  random.Shuffle(std::span<int>(w.arrivals));
  return w;
}

}  // namespace gpupool::pool::sim
