#include "runtime/service/sampled_unavailability.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "runtime/service/history_sampler.h"

namespace gpupool::runtime {
namespace {

// One sample: the schedulable GPUs of each model, and whether it can say (it has per-model rows,
// or the pool had nothing schedulable).
struct Sample {
  double t_s = 0;
  bool has_pool_row = false;
  bool has_model_rows = false;
  double pool_schedulable = 0;
  std::map<std::string, double> schedulable;
  bool Usable() const { return has_pool_row && (has_model_rows || pool_schedulable <= 0); }
};

std::vector<Sample> SamplesOf(const std::vector<HistoryRow>& rows) {
  std::vector<Sample> samples;
  for (const HistoryRow& r : rows) {
    if (samples.empty() || samples.back().t_s != r.t_s) samples.push_back(Sample{.t_s = r.t_s});
    Sample& s = samples.back();
    if (r.scope == "pool") {
      s.has_pool_row = true;
      s.pool_schedulable = r.capacity_gpus;
    } else if (absl::StartsWith(r.scope, kModelScopePrefix)) {
      s.has_model_rows = true;
      s.schedulable[r.scope.substr(sizeof(kModelScopePrefix) - 1)] += r.capacity_gpus;
    }
  }
  std::erase_if(samples, [](const Sample& s) { return !s.Usable(); });
  return samples;
}

}  // namespace

SampledUnavailability UnavailableFromHistory(const std::vector<HistoryRow>& rows,
                                             const std::map<std::string, int>& declared, double from_s,
                                             double to_s, double interval_s) {
  SampledUnavailability out;
  double covered_to = from_s;  // [from_s, covered_to) is accounted for, sampled or not
  if (interval_s > 0) {
    const std::vector<Sample> samples = SamplesOf(rows);
    for (size_t i = 0; i < samples.size(); ++i) {
      const Sample& s = samples[i];
      double end = s.t_s + interval_s;
      if (i + 1 < samples.size()) {
        const double next = samples[i + 1].t_s;
        end = next - s.t_s <= 2 * interval_s ? next : std::min(end, next);
      }
      const double start = std::max(s.t_s, from_s);
      end = std::min(end, to_s);
      if (end <= start) continue;
      if (start > covered_to) out.unsampled.emplace_back(covered_to, start);
      covered_to = std::max(covered_to, end);
      const double hours = (end - start) / 3600.0;
      for (const auto& [model, n] : declared) {
        auto it = s.schedulable.find(model);
        const double down = n - (it == s.schedulable.end() ? 0.0 : it->second);
        if (down > 0) out.gpu_hours[model] += down * hours;
      }
    }
  }
  if (covered_to < to_s) out.unsampled.emplace_back(covered_to, to_s);
  return out;
}

}  // namespace gpupool::runtime
