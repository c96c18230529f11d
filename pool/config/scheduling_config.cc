#include "pool/config/scheduling_config.h"

#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pool/gpu_catalogue.h"

namespace gpupool::pool {
namespace {

// GPUs (a non-negative number) to milli-GPUs.
absl::StatusOr<int64_t> ReadGpus(const ConfigReader& r, const YAML::Node& n,
                                 const std::string& path) {
  absl::StatusOr<double> v = r.Double(n, path);
  if (!v.ok()) return v.status();
  if (*v < 0) return r.Error(n, path, absl::StrCat(*v, " is negative"));
  if (*v > 1e9) return r.Error(n, path, "is too large");
  return static_cast<int64_t>(std::llround(*v * 1000));
}

absl::Status ReadModelGroups(const ConfigReader& r, const YAML::Node& node,
                             SchedulingConfig& config) {
  if (!node.IsMap()) return r.Error(node, "model_groups", "must map group names to model lists");
  for (const auto& kv : node) {
    std::string name = kv.first.as<std::string>();
    std::string path = absl::StrCat("model_groups.", name);
    if (FindGpuModel(name) != nullptr) {
      return r.Error(kv.first, path, "a group cannot be named like a catalogue model");
    }
    absl::StatusOr<std::vector<std::string>> models = r.StringList(kv.second, path);
    if (!models.ok()) return models.status();
    if (models->empty()) return r.Error(kv.second, path, "lists no models");
    std::vector<std::string> canonical;
    for (size_t i = 0; i < models->size(); ++i) {
      absl::StatusOr<const GpuModel*> m = RequireGpuModel((*models)[i]);
      if (!m.ok()) return r.Error(kv.second[i], absl::StrCat(path, "[", i, "]"), m.status().message());
      canonical.push_back((*m)->name);
    }
    config.model_groups[name] = canonical;
  }
  return absl::OkStatus();
}

absl::Status ReadPriorityClasses(const ConfigReader& r, const YAML::Node& node,
                                 SchedulingConfig& config) {
  if (!node.IsSequence() || node.size() == 0) {
    return r.Error(node, "priority_classes", "must be a non-empty list");
  }
  config.priority_classes.clear();
  std::set<std::string> names;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& c = node[i];
    std::string path = absl::StrCat("priority_classes[", i, "]");
    if (absl::Status s = r.CheckKeys(c, path, {"name", "value", "preemptible", "grace_period_s",
                                               "checkpoint_interval_s"});
        !s.ok()) {
      return s;
    }
    PriorityClass pc;
    if (!c["name"] || !c["value"]) return r.Error(c, path, "needs a name and a value");
    absl::StatusOr<std::string> name = r.String(c["name"], path + ".name");
    if (!name.ok()) return name.status();
    if (!names.insert(*name).second) {
      return r.Error(c["name"], path + ".name", absl::StrCat("priority class '", *name, "' is defined twice"));
    }
    pc.name = *name;
    absl::StatusOr<int> value = r.Int(c["value"], path + ".value", -1000000, 1000000);
    if (!value.ok()) return value.status();
    pc.value = *value;
    if (c["preemptible"]) {
      absl::StatusOr<bool> b = r.Bool(c["preemptible"], path + ".preemptible");
      if (!b.ok()) return b.status();
      pc.preemptible = *b;
    }
    for (auto [key, field] : {std::pair{"grace_period_s", &pc.grace_period_s},
                              std::pair{"checkpoint_interval_s", &pc.checkpoint_interval_s}}) {
      if (!c[key]) continue;
      absl::StatusOr<int> v = r.Int(c[key], absl::StrCat(path, ".", key), 0, 7 * 24 * 3600);
      if (!v.ok()) return v.status();
      *field = *v;
    }
    config.priority_classes.push_back(pc);
  }
  return absl::OkStatus();
}

// A user name as useradd accepts one (and no more: the name reaches getpwnam on every node, and
// a typo that looked like a path or an option should fail here, not there).
bool IsUserName(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(name[0])) return false;
  for (char c : name) {
    if (!letter(c) && !(c >= '0' && c <= '9') && c != '.' && c != '-') return false;
  }
  return true;
}

// The group a quota or reserve names: a model group, or a catalogue model that belongs to none.
absl::StatusOr<std::string> ReadGroup(const ConfigReader& r, const YAML::Node& n, const std::string& path,
                                      const SchedulingConfig& config, absl::string_view what) {
  absl::StatusOr<std::string> group = r.String(n, path);
  if (!group.ok()) return group.status();
  if (config.model_groups.contains(*group)) return *group;
  if (const GpuModel* m = FindGpuModel(*group)) {
    std::string owner = config.GroupOf(m->name);
    if (owner != m->name) {
      return r.Error(n, path, absl::StrCat(m->name, " belongs to model group '", owner, "': write the ",
                                           what, " against the group"));
    }
    return owner;
  }
  return r.Error(n, path, absl::StrCat("'", *group, "' is neither a model group nor a GPU model (models: ",
                                       KnownGpuModelNames(), ")"));
}

absl::Status ReadTeams(const ConfigReader& r, const YAML::Node& node, SchedulingConfig& config) {
  if (!node.IsSequence()) return r.Error(node, "teams", "must be a list of teams");
  std::set<std::string> names;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& t = node[i];
    std::string path = absl::StrCat("teams[", i, "]");
    if (absl::Status s = r.CheckKeys(t, path, {"name", "weight", "run_as", "cost_center", "quotas"}); !s.ok()) return s;
    if (!t["name"]) return r.Error(t, path, "needs a name");
    Team team;
    absl::StatusOr<std::string> name = r.String(t["name"], path + ".name");
    if (!name.ok()) return name.status();
    if (name->empty()) return r.Error(t["name"], path + ".name", "must not be empty");
    if (!names.insert(*name).second) {
      return r.Error(t["name"], path + ".name", absl::StrCat("team '", *name, "' is defined twice"));
    }
    // The tokens file gives these names to the node agents and the operators, not to teams.
    if (*name == "agents" || *name == "operators") {
      return r.Error(t["name"], path + ".name",
                     absl::StrCat("'", *name, "' is reserved (the tokens file's line for the ", *name,
                                  "); name the team otherwise"));
    }
    // The pool's own work (diagnostics: runtime/service/diagnostic_holds.h) is charged to "_pool".
    if (absl::StartsWith(*name, "_")) {
      return r.Error(t["name"], path + ".name",
                     absl::StrCat("'", *name, "': names starting with '_' are the pool's own (its diagnostics are "
                                  "charged to team '_pool'); name the team otherwise"));
    }
    // The history names its per-model rows "model:<model>" beside the teams' (runtime/service).
    if (absl::StartsWith(*name, "model:")) {
      return r.Error(t["name"], path + ".name",
                     absl::StrCat("'", *name, "': a team's name must not start with 'model:' (the history's per-model rows)"));
    }
    team.name = *name;
    if (t["cost_center"]) {
      absl::StatusOr<std::string> cc = r.String(t["cost_center"], path + ".cost_center");
      if (!cc.ok()) return cc.status();
      if (cc->empty()) return r.Error(t["cost_center"], path + ".cost_center", "must not be empty when given");
      team.cost_center = *cc;
    }
    if (t["weight"]) {
      absl::StatusOr<double> w = r.Double(t["weight"], path + ".weight");
      if (!w.ok()) return w.status();
      if (!(*w > 0)) return r.Error(t["weight"], path + ".weight", "must be greater than 0");
      team.weight = *w;
    }
    if (t["run_as"]) {
      absl::StatusOr<std::string> user = r.String(t["run_as"], path + ".run_as");
      if (!user.ok()) return user.status();
      if (!IsUserName(*user)) {
        return r.Error(t["run_as"], path + ".run_as",
                       absl::StrCat("'", *user, "' is not a user name (a letter or '_', then letters, digits, "
                                    "'_', '.' or '-', at most 32 characters)"));
      }
      team.run_as = *user;
    }
    const YAML::Node& quotas = t["quotas"];
    if (quotas && !quotas.IsSequence()) return r.Error(quotas, path + ".quotas", "must be a list");
    std::set<std::string> groups;
    for (size_t j = 0; quotas && j < quotas.size(); ++j) {
      const YAML::Node& q = quotas[j];
      std::string qpath = absl::StrCat(path, ".quotas[", j, "]");
      if (absl::Status s = r.CheckKeys(q, qpath, {"gpus", "nominal", "borrowing_limit", "lending_limit"});
          !s.ok()) {
        return s;
      }
      if (!q["gpus"] || !q["nominal"]) return r.Error(q, qpath, "needs gpus (a model or group) and nominal");
      TeamQuota quota;
      absl::StatusOr<std::string> group = ReadGroup(r, q["gpus"], qpath + ".gpus", config, "quota");
      if (!group.ok()) return group.status();
      quota.group = *group;
      if (!groups.insert(quota.group).second) {
        return r.Error(q["gpus"], qpath + ".gpus", absl::StrCat("a second quota for '", quota.group, "'"));
      }
      absl::StatusOr<int64_t> nominal = ReadGpus(r, q["nominal"], qpath + ".nominal");
      if (!nominal.ok()) return nominal.status();
      quota.nominal_milli = *nominal;
      if (q["borrowing_limit"]) {
        absl::StatusOr<int64_t> b = ReadGpus(r, q["borrowing_limit"], qpath + ".borrowing_limit");
        if (!b.ok()) return b.status();
        quota.borrowing_limit_milli = *b;
      }
      if (q["lending_limit"]) {
        absl::StatusOr<int64_t> l = ReadGpus(r, q["lending_limit"], qpath + ".lending_limit");
        if (!l.ok()) return l.status();
        if (*l > quota.nominal_milli) {
          return r.Error(q["lending_limit"], qpath + ".lending_limit",
                         absl::StrCat("lending limit ", *l / 1000.0, " exceeds the nominal quota ",
                                      quota.nominal_milli / 1000.0));
        }
        quota.lending_limit_milli = *l;
      }
      team.quotas.push_back(quota);
    }
    config.teams.push_back(std::move(team));
  }
  return absl::OkStatus();
}

absl::Status ReadReserves(const ConfigReader& r, const YAML::Node& node, SchedulingConfig& config) {
  if (!node.IsSequence()) return r.Error(node, "reserve", "must be a list of {group, gpus, for_priority_at_least}");
  std::set<std::string> groups;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& n = node[i];
    std::string path = absl::StrCat("reserve[", i, "]");
    if (absl::Status s = r.CheckKeys(n, path, {"group", "gpus", "for_priority_at_least"}); !s.ok()) return s;
    if (!n["group"] || !n["gpus"] || !n["for_priority_at_least"]) {
      return r.Error(n, path, "needs group (a model group or GPU model), gpus and for_priority_at_least (a priority class)");
    }
    SpareReserve reserve;
    absl::StatusOr<std::string> group = ReadGroup(r, n["group"], path + ".group", config, "reserve");
    if (!group.ok()) return group.status();
    if (!groups.insert(*group).second) {
      return r.Error(n["group"], path + ".group", absl::StrCat("a second reserve for '", *group, "'"));
    }
    reserve.group = *group;
    // Whole GPUs: the reserve is GPUs kept entirely free, not compute shares.
    absl::StatusOr<int> gpus = r.Int(n["gpus"], path + ".gpus", 0, 1000000);
    if (!gpus.ok()) return gpus.status();
    reserve.gpus = *gpus;
    absl::StatusOr<std::string> cls = r.String(n["for_priority_at_least"], path + ".for_priority_at_least");
    if (!cls.ok()) return cls.status();
    if (config.FindClass(*cls) == nullptr) {
      std::vector<std::string> names;
      for (const PriorityClass& c : config.priority_classes) names.push_back(c.name);
      return r.Error(n["for_priority_at_least"], path + ".for_priority_at_least",
                     absl::StrCat("unknown priority class '", *cls, "' (classes: ", absl::StrJoin(names, ", "), ")"));
    }
    reserve.for_priority_at_least = *cls;
    config.reserves.push_back(std::move(reserve));
  }
  return absl::OkStatus();
}

// What is wrong with reserve `i` against the pool's capacity ("" when nothing), and which of its
// fields it is about.
std::pair<std::string, std::string> ReserveCapacityProblem(const SchedulingConfig& config, size_t i,
                                                           const std::map<std::string, int>& gpus_per_model) {
  const SpareReserve& reserve = config.reserves[i];
  int capacity = 0;
  for (const auto& [model, count] : gpus_per_model) {
    if (config.GroupOf(model) == reserve.group) capacity += count;
  }
  if (reserve.gpus > capacity) {
    return {"gpus", absl::StrCat("a reserve of ", reserve.gpus, " GPUs exceeds the ", capacity,
                                 " GPUs of '", reserve.group, "' in this pool")};
  }
  int64_t nominal_milli = 0;
  for (const Team& t : config.teams) {
    if (const TeamQuota* q = t.QuotaFor(reserve.group)) nominal_milli += q->nominal_milli;
  }
  if (nominal_milli > int64_t{capacity - reserve.gpus} * 1000) {
    return {"gpus", absl::StrCat("the teams' nominal quotas for '", reserve.group, "' total ",
                                 nominal_milli / 1000.0, " GPUs, more than its capacity minus the reserve (",
                                 capacity, " - ", reserve.gpus, " = ", capacity - reserve.gpus,
                                 "): lower the quotas or the reserve")};
  }
  return {"", ""};
}

}  // namespace

absl::Status CheckSpareReserves(const SchedulingConfig& config, const std::map<std::string, int>& gpus_per_model) {
  for (size_t i = 0; i < config.reserves.size(); ++i) {
    auto [field, problem] = ReserveCapacityProblem(config, i, gpus_per_model);
    if (!problem.empty()) return absl::InvalidArgumentError(absl::StrCat("reserve[", i, "].", field, ": ", problem));
  }
  return absl::OkStatus();
}

const TeamQuota* Team::QuotaFor(absl::string_view group) const {
  for (const TeamQuota& q : quotas) {
    if (q.group == group) return &q;
  }
  return nullptr;
}

const PriorityClass* SchedulingConfig::FindClass(absl::string_view name) const {
  for (const PriorityClass& c : priority_classes) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const Team* SchedulingConfig::FindTeam(absl::string_view name) const {
  for (const Team& t : teams) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string SchedulingConfig::GroupOf(absl::string_view model) const {
  for (const auto& [group, models] : model_groups) {
    for (const std::string& m : models) {
      if (m == model) return group;
    }
  }
  return std::string(model);
}

SchedulingConfig DefaultSchedulingConfig() {
  SchedulingConfig config;
  config.priority_classes = {
      {"production-inference", 1000, /*preemptible=*/false, /*grace=*/300, /*checkpoint=*/0},
      {"training", 500, true, 120, 600},
      {"experiment", 100, true, 30, 600},
  };
  return config;
}

absl::Status ReadSchedulingConfig(const ConfigReader& reader, const YAML::Node& root,
                                  SchedulingConfig& config, const std::map<std::string, int>* gpus_per_model) {
  // Groups first: team quotas refer to them.
  if (const YAML::Node& groups = root["model_groups"]) {
    if (absl::Status s = ReadModelGroups(reader, groups, config); !s.ok()) return s;
  }
  if (const YAML::Node& classes = root["priority_classes"]) {
    if (absl::Status s = ReadPriorityClasses(reader, classes, config); !s.ok()) return s;
  }
  if (const YAML::Node& teams = root["teams"]) {
    if (absl::Status s = ReadTeams(reader, teams, config); !s.ok()) return s;
  }
  // Reserves last: they name groups and classes, and are checked against the teams' quotas.
  if (const YAML::Node& reserves = root["reserve"]) {
    if (absl::Status s = ReadReserves(reader, reserves, config); !s.ok()) return s;
    for (size_t i = 0; gpus_per_model != nullptr && i < config.reserves.size(); ++i) {
      auto [field, problem] = ReserveCapacityProblem(config, i, *gpus_per_model);
      if (!problem.empty()) {
        return reader.Error(reserves[i][field], absl::StrCat("reserve[", i, "].", field), problem);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gpupool::pool
