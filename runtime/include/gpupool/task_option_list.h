// File: gpupool/task_option_list.h
//
// Every task option, declared once. TaskOptions' fields and setters, TaskBuilder's setters
// (gpupool/runtime.h), the options' encoding (lineage across ranks, the runtime's lease-sharing
// key) and the Python keywords (`@gpupool.remote(...)`, `f.options(...)`) are all generated from
// this list, so they cannot drift. What each option means for scheduling is in task_options.h.
//
// One row per option:
//
//   X(Type, field, Setter, KIND, "python_keyword", default, "what it means")
//
//   Type, field, default  the TaskOptions field: `Type field = default;`
//   Setter               the chained C++ setter on TaskOptions and TaskBuilder; KIND says its shape:
//                          VALUE  `Setter(Type v)`                    sets the field
//                          FLAG   `Setter(bool on = true)`            sets a bool field
//                          ENTRY  `Setter(std::string k, std::string v)` adds one entry to a map
//   python_keyword       the keyword Python code passes (None there means the default)
//
// Adding an option: add its row here (at the end: rows are encoded in order, and objects'
// lineage crosses ranks of one job encoded this way), document it in task_options.h and README.md,
// and teach the runtime what to do with it (runtime/tasks/task_shapes.cc turns options into a
// lease request). Nothing else needs to know it exists.
//
// Types with commas are named by the aliases below (the preprocessor splits arguments at commas).
#ifndef GPUPOOL_TASK_OPTION_LIST_H_
#define GPUPOOL_TASK_OPTION_LIST_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpupool {
using TaskLabelMap = std::map<std::string, std::string>;  // label -> value
}  // namespace gpupool

// clang-format off
#define GPUPOOL_TASK_OPTIONS(X)                                                                     \
  X(double, gpus, Gpus, VALUE, "gpus", 0,                                                           \
    "0: a CPU task; 0 < f < 1: a share f of one GPU; n = 1, 2, ...: n whole GPUs on one node")    \
  X(int64_t, gpu_memory_mib, GpuMemoryMib, VALUE, "gpu_memory_mib", 0,                              \
    "the memory budget; 0: the whole GPU's, or for a fraction f of the smallest eligible GPU's") \
  X(std::vector<std::string>, models, Models, VALUE, "models", {},                                  \
    "catalogue names the GPUs must be one of; empty: any model")                                   \
  X(::gpupool::TaskLabelMap, labels, Label, ENTRY, "labels", {},                                    \
    "node labels that must all match (affinity)")                                                   \
  X(::gpupool::TaskLabelMap, avoid_labels, AvoidLabel, ENTRY, "avoid_labels", {},                   \
    "node labels none of which may match (anti-affinity)")                                          \
  X(bool, hardware_isolation, HardwareIsolation, FLAG, "isolation", false,                          \
    "MIG instances or whole GPUs only: no fraction shared with other tasks")                       \
  X(std::string, team, Team, VALUE, "team", {},                                                     \
    "the team whose quota pays; empty: the runtime's default team")                                \
  X(std::string, project, Project, VALUE, "project", {},                                            \
    "free-form, for accounting")                                                                    \
  X(std::string, workload_class, WorkloadClass, VALUE, "workload_class", {},                        \
    "free-form (\"training\", \"inference\", ...), for accounting")                                 \
  X(std::string, priority_class, PriorityClass, VALUE, "priority_class", {},                        \
    "a priority class of the pool's configuration; empty: \"training\"")                           \
  X(int, max_retries, MaxRetries, VALUE, "max_retries", 3,                                          \
    "retries after system failures (lost leases); preemptions do not count")                       \
  X(std::string, name, Name, VALUE, "name", {},                                                     \
    "shown in errors and events; empty: the function's registered name")                           \
  X(double, cpus, Cpus, VALUE, "cpus", 0,                                                           \
    "host CPU cores a GPU task's lease holds on its node (a gang's split over its GPUs); 0: none") \
  X(int64_t, host_memory_mib, HostMemoryMib, VALUE, "host_memory_mib", 0,                           \
    "host memory a GPU task's lease holds on its node, in MiB (split likewise); 0: none")
// clang-format on

#endif  // GPUPOOL_TASK_OPTION_LIST_H_
