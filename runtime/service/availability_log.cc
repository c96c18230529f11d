#include "runtime/service/availability_log.h"

#include <algorithm>

namespace gpupool::runtime {

void AvailabilityLog::Set(const std::string& gpu, const std::string& model, bool available, double now_s) {
  auto it = open_.find(gpu);
  if (!available) {
    if (it == open_.end()) open_[gpu] = Interval{model, now_s, now_s};
    return;
  }
  if (it == open_.end()) return;
  it->second.end_s = now_s;
  closed_.push_back(std::move(it->second));
  open_.erase(it);
  if (closed_.size() > kMaxClosed) closed_.pop_front();
}

std::map<std::string, double> AvailabilityLog::UnavailableGpuHours(double from_s, double to_s, double now_s) const {
  std::map<std::string, double> hours;
  auto add = [&](const std::string& model, double start, double end) {
    double overlap = std::min(end, to_s) - std::max(start, from_s);
    if (overlap > 0) hours[model] += overlap / 3600.0;
  };
  for (const Interval& i : closed_) add(i.model, i.start_s, i.end_s);
  for (const auto& [gpu, i] : open_) add(i.model, i.start_s, now_s);
  return hours;
}

}  // namespace gpupool::runtime
