// File: pool/config/scheduling_config.h
//
// Who may use the pool and how much: priority classes, teams with per-model-group quotas, and the
// model groups quotas are written against. Read from the pool's YAML file:
//
//   model_groups:                  # optional; every catalogue model is also its own group
//     hopper: [H100-80GB, H200-141GB]
//   priority_classes:              # optional; these three are the defaults
//     - {name: production-inference, value: 1000, preemptible: false, grace_period_s: 300}
//     - {name: training,   value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
//     - {name: experiment, value: 100, preemptible: true, grace_period_s: 30,  checkpoint_interval_s: 600}
//   teams:
//     - name: vision               # not "agents" or "operators" (the tokens file's reserved names)
//       weight: 2                  # fair-share weight, > 0
//       cost_center: cc-4711       # who pays (`gpupool usage --by cost-center`); default: the team
//       quotas:
//         - {gpus: hopper, nominal: 8, borrowing_limit: 8, lending_limit: 4}
//   reserve:                       # optional: spare capacity for urgent work (see SpareReserve)
//     - {group: hopper, gpus: 2, for_priority_at_least: production-inference}
//
// Quantities are GPUs (fractions allowed: 0.5 is half a GPU's compute); inside they are
// milli-GPUs. Semantics, as Kueue users expect:
//   - nominal: guaranteed. A request that keeps its team within nominal is admitted within its
//     class's grace period, reclaiming capacity lent to others if it must.
//   - borrowing_limit: how far beyond nominal the team may go by borrowing idle capacity
//     (absent: unlimited). Borrowed capacity is preemptible by its owners.
//   - lending_limit: how much of the nominal quota others may borrow while the team is not using
//     it (absent: all of it). Must not exceed nominal.
//   - A non-preemptible class never borrows: it runs only within nominal quota.
#ifndef GPUPOOL_POOL_CONFIG_SCHEDULING_CONFIG_H_
#define GPUPOOL_POOL_CONFIG_SCHEDULING_CONFIG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pool/config/config_reader.h"

namespace gpupool::pool {

struct PriorityClass {
  std::string name;
  int value = 0;                      // higher wins
  bool preemptible = true;
  int64_t grace_period_s = 0;         // time a revoked lease has to reach a safe point
  int64_t checkpoint_interval_s = 0;  // forced checkpoint interval; 0 = none
};

struct TeamQuota {
  std::string group;                      // a model group (or a catalogue model name)
  int64_t nominal_milli = 0;
  std::optional<int64_t> borrowing_limit_milli;  // absent: unlimited
  std::optional<int64_t> lending_limit_milli;    // absent: the whole nominal quota
};

struct Team {
  std::string name;
  double weight = 1.0;
  // The OS user a node agent running as root starts this team's worker processes as (DESIGN §6);
  // empty: none, and a root agent refuses the team's workers unless it allows root workers.
  std::string run_as;
  // Who pays for the team's GPU-hours (`gpupool usage --by cost-center`); empty: the team's name.
  std::string cost_center;
  std::vector<TeamQuota> quotas;
  const TeamQuota* QuotaFor(absl::string_view group) const;
};

// `reserve:`: per quota group, whole GPUs kept entirely free for requests of priority classes
// whose value is at least `for_priority_at_least`'s, so that such a request is placed at once
// instead of waiting out a preemption's grace period. The reserve lies outside every nominal
// quota: the teams' nominal quotas in the group may total at most its capacity minus `gpus`
// (checked where the capacity is known: with `nodes:` in the file, and by the head against the
// GPUs it discovers). Scheduling semantics: pool/scheduler/spare_reserve.h.
struct SpareReserve {
  std::string group;                  // a model group (or a catalogue model in no group)
  int gpus = 0;                       // whole GPUs
  std::string for_priority_at_least;  // a priority class name
};

struct SchedulingConfig {
  std::map<std::string, std::vector<std::string>> model_groups;  // group -> catalogue models
  std::vector<PriorityClass> priority_classes;
  std::vector<Team> teams;
  std::vector<SpareReserve> reserves;  // at most one per group

  const PriorityClass* FindClass(absl::string_view name) const;
  const Team* FindTeam(absl::string_view name) const;
  // The quota group a GPU model counts against: the first configured group listing it, else the
  // model's own name.
  std::string GroupOf(absl::string_view model) const;
};

// The default priority classes and no teams.
SchedulingConfig DefaultSchedulingConfig();

// Reads `model_groups`, `priority_classes`, `teams` and `reserve` from the top-level mapping into
// `config` (which starts as DefaultSchedulingConfig()). Invalid fields are named with their
// position: negative quotas, lending above nominal, unknown models, groups or classes, duplicate
// names. With `gpus_per_model` (the pool's GPUs by catalogue model, when the file declares its
// nodes) the reserves are also checked against capacity (CheckSpareReserves).
absl::Status ReadSchedulingConfig(const ConfigReader& reader, const YAML::Node& root,
                                  SchedulingConfig& config,
                                  const std::map<std::string, int>* gpus_per_model = nullptr);

// Checks every reserve against the pool's capacity (`gpus_per_model`: GPUs by model name, which
// GroupOf maps to groups): InvalidArgument naming `reserve[i]` and the numbers when the reserve
// exceeds the group's GPUs, or when the teams' nominal quotas in the group exceed its capacity
// minus the reserve. The head calls it with the GPUs it discovered.
absl::Status CheckSpareReserves(const SchedulingConfig& config,
                                const std::map<std::string, int>& gpus_per_model);

}  // namespace gpupool::pool

#endif  // GPUPOOL_POOL_CONFIG_SCHEDULING_CONFIG_H_
