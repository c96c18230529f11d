#include "pool/sim/team_workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "pool/gpu_catalogue.h"

namespace gpupool::pool::sim {
namespace {

constexpr int64_t kHour = 3600;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kWeek = 7 * kDay;

// Draws from raw 64-bit outputs so the workload is identical across standard libraries
// (std::*_distribution is implementation-defined).
class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  int64_t Between(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(Uniform() * static_cast<double>(hi - lo + 1));
  }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

std::string TeamsPoolYaml(int teams) {
  static constexpr const char* kNames[] = {"vision", "speech", "search", "ads"};
  std::string yaml = absl::StrCat("nodes:\n  - {name: n, count: ", 2 * teams,
                                  ", gpus: [{model: H100-80GB, count: 8}]}\nteams:\n");
  for (int t = 0; t < teams; ++t) {
    std::string name = t < 4 ? kNames[t] : absl::StrCat("team", t + 1);
    absl::StrAppend(&yaml, "  - {name: ", name, ", quotas: [{gpus: H100-80GB, nominal: 16}]}\n");
  }
  return yaml;
}

namespace {

// The memory of the smallest catalogue model in `group` (a model group of the config, or a
// catalogue model's own group). A validated config names only catalogue models in its groups and
// quotas; 0 (no model) makes the notebooks' requests invalid, refused at submission, rather than
// sized for a GPU the group does not have.
int64_t SmallestMemoryMib(const SchedulingConfig& config, const std::string& group) {
  std::vector<std::string> models = {group};
  if (auto it = config.model_groups.find(group); it != config.model_groups.end()) models = it->second;
  int64_t smallest = 0;
  for (const std::string& name : models) {
    const GpuModel* model = FindGpuModel(name);
    if (model == nullptr) continue;
    if (smallest == 0 || model->memory_mib < smallest) smallest = model->memory_mib;
  }
  return smallest;
}

}  // namespace

std::vector<SimJob> GenerateTeamWorkload(const SchedulingConfig& config, const std::string& group,
                                         const TeamWorkloadOptions& o) {
  Draw draw(o.seed);
  std::vector<SimJob> jobs;
  const int64_t horizon = o.weeks * kWeek;
  int serial = 0;
  // A quarter of the GPU in memory as well as compute: a quarter of the group's smallest model's
  // memory, not "20 GiB", which on an H100-80GB (81,559 MiB usable) would let only three share a
  // GPU and strand the fourth quarter of every GPU full of notebooks.
  const SlotShape quarter = SlotShape::Fraction(SmallestMemoryMib(config, group) / 4, 250);
  auto add = [&](const Team& team, int64_t at, const std::string& cls, int slots, SlotShape shape,
                 GangTopology topology, int64_t work, bool checkpointable, bool sprint,
                 int64_t patience) {
    SimJob job;
    job.request.id = absl::StrCat(team.name, "-", serial++);
    job.request.team = team.name;
    job.request.priority_class = cls;
    job.request.workload_class = cls;
    job.request.slot_count = slots;
    job.request.slot = shape;
    job.request.topology = topology;
    job.request.runtime_estimate_s = work;
    job.arrival_s = at;
    job.work_s = std::max<int64_t>(60, work);
    job.checkpointable = checkpointable;
    job.sprint = sprint;
    job.patience_s = o.impatient ? patience : 0;
    jobs.push_back(std::move(job));
  };
  for (const Team& team : config.teams) {
    const TeamQuota* quota = team.QuotaFor(group);
    int nominal_gpus = quota == nullptr ? 0 : static_cast<int>(quota->nominal_milli / 1000);
    if (nominal_gpus < 1) continue;
    // The inference service: half a GPU per 8 GPUs of quota, up for the whole horizon.
    for (int i = 0; i < std::max(1, nominal_gpus / 8); ++i) {
      add(team, 0, "production-inference", 1, SlotShape::Fraction(20480, 500), GangTopology::kAny,
          horizon, false, false, 0);
    }
    const int gang = std::min(8, std::max(1, nominal_gpus / 2));
    for (int week = 0; week < o.weeks; ++week) {
      const bool sprint = draw.Uniform() < o.sprint_probability;
      const int64_t start = week * kWeek;
      if (!sprint) {
        // A quiet week: a notebook a working day.
        for (int day = 0; day < 5; ++day) {
          add(team, start + day * kDay + draw.Between(9, 12) * kHour, "experiment", 1,
              quarter, GangTopology::kAny, draw.Between(2, 6) * kHour,
              false, false, /*patience=*/kHour);
        }
        continue;
      }
      // A sprint: GPU-hours worth `burst_factor` x the quota over the week, as training gangs
      // (60%), experiments (35%) and notebooks (5%).
      const double budget = o.burst_factor * nominal_gpus * 7 * 24;  // GPU-hours
      double training = 0.60 * budget, experiments = 0.35 * budget, notebooks = 0.05 * budget;
      const int64_t sprint_end = start + kWeek;
      while (training > 0) {
        int64_t work = static_cast<int64_t>(draw.Exponential(12 * kHour)) + kHour;
        int64_t at = start + draw.Between(0, 5 * kDay);
        add(team, at, "training", gang, SlotShape::WholeGpu(), GangTopology::kSameNode, work, true,
            true, /*patience=*/sprint_end + kWeek - at);
        training -= gang * static_cast<double>(work) / kHour;
      }
      while (experiments > 0) {
        int slots = static_cast<int>(draw.Between(1, 2));
        int64_t work = draw.Between(1, 6) * kHour;
        int64_t at = start + draw.Between(0, 6 * kDay);
        add(team, at, "experiment", slots, SlotShape::WholeGpu(), GangTopology::kSameNode, work,
            true, true, /*patience=*/sprint_end - at);
        experiments -= slots * static_cast<double>(work) / kHour;
      }
      while (notebooks > 0) {
        int64_t work = draw.Between(2, 8) * kHour;
        add(team, start + draw.Between(0, 5) * kDay + draw.Between(9, 12) * kHour, "experiment", 1,
            quarter, GangTopology::kAny, work, false, true,
            /*patience=*/kHour);
        notebooks -= 0.25 * static_cast<double>(work) / kHour;
      }
    }
  }
  if (o.urgent_per_team_day > 0) {
    Draw urgent(o.seed ^ 0x9e3779b97f4a7c15ULL);
    const double mean_gap_s = static_cast<double>(kDay) / o.urgent_per_team_day;
    for (const Team& team : config.teams) {
      const TeamQuota* quota = team.QuotaFor(group);
      if (quota == nullptr || quota->nominal_milli < 1000) continue;
      for (int64_t at = static_cast<int64_t>(urgent.Exponential(mean_gap_s)); at < horizon;
           at += std::max<int64_t>(1, static_cast<int64_t>(urgent.Exponential(mean_gap_s)))) {
        add(team, at, o.urgent_class, 1, SlotShape::WholeGpu(), GangTopology::kAny,
            urgent.Between(10, 60) * 60, false, false, 0);
      }
    }
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const SimJob& a, const SimJob& b) { return a.arrival_s < b.arrival_s; });
  return jobs;
}

}  // namespace gpupool::pool::sim
