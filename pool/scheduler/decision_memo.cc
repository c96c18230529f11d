#include "pool/scheduler/decision_memo.h"

#include <algorithm>

namespace gpupool::pool {

void DecisionMemo::StartCycle(int64_t now_s) {
  // Backfill verdicts depend on the cycle's time, so placement and preemption failures start
  // afresh (the maps are cleared too, so they do not grow over a long run).
  ++growth_epoch_;
  placement_.clear();
  preemption_.clear();
  std::erase_if(move_, [&](const auto& entry) { return !Live(entry.second, now_s); });
}

DecisionMemo::PlacementRecall DecisionMemo::RecallPlacement(const PlacementMemoKey& key) const {
  auto it = placement_.find(key);
  if (it == placement_.end() || it->second.growth_epoch != growth_epoch_) return {};
  return {it->second.state_epoch == state_epoch_ ? Recall::kExact : Recall::kShrunk, it->second.reason};
}

void DecisionMemo::RememberPlacementFailure(const PlacementMemoKey& key, WaitReason reason) {
  placement_[key] = {growth_epoch_, state_epoch_, reason};
}

bool DecisionMemo::PreemptionFailed(const PreemptionMemoKey& key) const {
  auto it = preemption_.find(key);
  return it != preemption_.end() && it->second == growth_epoch_;
}

void DecisionMemo::RememberPreemptionFailure(const PreemptionMemoKey& key) {
  preemption_[key] = growth_epoch_;
}

bool DecisionMemo::MoveFailed(const MoveMemoKey& key, int64_t now_s) const {
  auto it = move_.find(key);
  return it != move_.end() && Live(it->second, now_s);
}

void DecisionMemo::RememberMoveFailure(const MoveMemoKey& key, int64_t retry_at_s) {
  move_[key] = {freed_epoch_, borrowed_epoch_, retry_at_s};
}

std::optional<int64_t> DecisionMemo::NextMoveRetry(int64_t now_s) const {
  std::optional<int64_t> next;
  for (const auto& [key, failure] : move_) {
    if (failure.retry_at_s > now_s && (!next || failure.retry_at_s < *next)) next = failure.retry_at_s;
  }
  return next;
}

bool DecisionMemo::RefillFutile(const std::string& group) const {
  auto it = futile_refill_.find(group);
  return it != futile_refill_.end() && it->second == state_epoch_;
}

void DecisionMemo::RememberFutileRefill(const std::string& group) { futile_refill_[group] = state_epoch_; }

}  // namespace gpupool::pool
