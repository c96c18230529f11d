#include "pool/scheduler/spare_reserve.h"

#include "pool/scheduler/domain_fill.h"

namespace gpupool::pool {

SpareReserves::SpareReserves(const PoolTopology& topology, const SchedulingConfig& config)
    : rule_of_gpu_(topology.gpus().size(), -1), spare_(topology.gpus().size(), 0) {
  for (const SpareReserve& r : config.reserves) {
    const PriorityClass* pc = config.FindClass(r.for_priority_at_least);
    ReserveRule rule{.group = r.group, .gpus = r.gpus, .for_class = r.for_priority_at_least,
                     .min_priority = pc != nullptr ? pc->value : 0};
    by_group_[r.group] = rules_.size();
    rules_.push_back(std::move(rule));
  }
  for (size_t g = 0; g < topology.gpus().size(); ++g) {
    auto it = by_group_.find(topology.gpus()[g].group);
    if (it == by_group_.end()) continue;
    rule_of_gpu_[g] = static_cast<int>(it->second);
    rules_[it->second].group_gpus.push_back(static_cast<int>(g));
  }
  spare_count_.assign(rules_.size(), 0);
}

const ReserveRule* SpareReserves::For(const std::string& group) const {
  auto it = by_group_.find(group);
  if (it == by_group_.end() || rules_[it->second].gpus <= 0) return nullptr;
  return &rules_[it->second];
}

void SpareReserves::Refresh(const CapacityState& state, const std::vector<int>& gpus) {
  for (int g : gpus) {
    const int rule = rule_of_gpu_[g];
    if (rule < 0) continue;
    const char spare = SpareGpu(state, g) ? 1 : 0;
    spare_count_[rule] += spare - spare_[g];
    spare_[g] = spare;
  }
}

int SpareReserves::SpareNow(const ReserveRule& rule) const {
  return spare_count_[static_cast<size_t>(&rule - rules_.data())];
}

int SpareReserves::CountSpare(const CapacityState& state, const ReserveRule& rule) {
  int n = 0;
  for (int g : rule.group_gpus) n += SpareGpu(state, g) ? 1 : 0;
  return n;
}

}  // namespace gpupool::pool
