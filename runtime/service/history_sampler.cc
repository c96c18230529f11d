#include "runtime/service/history_sampler.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

std::vector<HistoryRow> HistoryRowsOf(const PoolSnapshot& s, double t_s) {
  HistoryRow pool{.t_s = t_s, .scope = "pool"};
  std::map<std::string, HistoryRow> models;
  for (const PoolSnapshot::Gpu& g : s.gpus) {
    const bool schedulable = g.health == pool::HealthState::kHealthy || g.health == pool::HealthState::kDegraded;
    pool.allocated_gpus += g.allocated;
    pool.capacity_gpus += schedulable;
    HistoryRow& m = models[g.model];
    m.allocated_gpus += g.allocated;
    m.capacity_gpus += schedulable;
  }
  std::map<std::string, HistoryRow> teams;
  auto team = [&](const std::string& name) -> HistoryRow& {
    HistoryRow& r = teams[name];
    r.t_s = t_s;
    r.scope = name;
    return r;
  };
  for (const auto& [key, g] : s.teams) {
    HistoryRow& r = team(key.first);
    r.allocated_gpus += g.allocated_gpus;
    r.capacity_gpus += g.nominal_gpus;
    r.borrowed_gpus += g.borrowed_gpus;
    pool.borrowed_gpus += g.borrowed_gpus;
  }
  for (const auto& [key, n] : s.pending) {
    team(std::get<0>(key)).pending += n;
    pool.pending += n;
  }
  std::vector<HistoryRow> out = {pool};
  for (auto& [model, r] : models) {
    r.t_s = t_s;
    r.scope = absl::StrCat(kModelScopePrefix, model);
    out.push_back(std::move(r));
  }
  for (auto& [name, r] : teams) out.push_back(std::move(r));
  return out;
}

}  // namespace gpupool::runtime
