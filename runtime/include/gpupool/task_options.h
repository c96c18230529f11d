// File: gpupool/task_options.h
//
// What a task needs and who pays for it. Chained, as Ray users write `.options(...)`:
//
//   gpupool::Task(Train).Gpus(1).GpuMemoryMib(40000).Models({"H100-80GB"})
//                       .Team("vision").PriorityClass("training").MaxRetries(2).Submit(cfg);
//
// Resources:
//   - Gpus(0) (the default): a CPU task, run on the process's worker threads, no lease.
//   - Gpus(f), 0 < f < 1: an in-process fraction of one GPU (compute share f); its memory budget
//     is GpuMemoryMib, or f of the smallest eligible GPU's memory when not given. Several
//     fractional tasks share one GPU, each within its own budget.
//   - Gpus(n), n = 1, 2, ...: n whole GPUs, granted together (a gang) on one node.
// Tasks with the same options share leases: the runtime asks the pool for leases of that shape
// while it has backlog, runs many tasks on each, and hands them back after a short linger.
#ifndef GPUPOOL_TASK_OPTIONS_H_
#define GPUPOOL_TASK_OPTIONS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gpupool {

struct TaskOptions {
  double gpus = 0;
  int64_t gpu_memory_mib = 0;                  // 0: whole GPU, or proportional for fractions
  std::vector<std::string> models;             // catalogue names; empty = any
  std::map<std::string, std::string> labels;   // every one must match (affinity)
  std::map<std::string, std::string> avoid_labels;  // none may match (anti-affinity)
  bool hardware_isolation = false;             // MIG or whole GPUs only
  std::string team;                            // empty: the runtime's default team
  std::string project;
  std::string workload_class;
  std::string priority_class;                  // empty: "training"
  int max_retries = 3;                         // retries after system failures (lost leases)
  std::string name;                            // shown in errors; default: the function's name

  TaskOptions& Gpus(double n) { gpus = n; return *this; }
  TaskOptions& GpuMemoryMib(int64_t mib) { gpu_memory_mib = mib; return *this; }
  TaskOptions& Models(std::vector<std::string> m) { models = std::move(m); return *this; }
  TaskOptions& Label(std::string k, std::string v) { labels[std::move(k)] = std::move(v); return *this; }
  TaskOptions& AvoidLabel(std::string k, std::string v) { avoid_labels[std::move(k)] = std::move(v); return *this; }
  TaskOptions& HardwareIsolation(bool on = true) { hardware_isolation = on; return *this; }
  TaskOptions& Team(std::string t) { team = std::move(t); return *this; }
  TaskOptions& Project(std::string p) { project = std::move(p); return *this; }
  TaskOptions& WorkloadClass(std::string c) { workload_class = std::move(c); return *this; }
  TaskOptions& PriorityClass(std::string c) { priority_class = std::move(c); return *this; }
  TaskOptions& MaxRetries(int n) { max_retries = n; return *this; }
  TaskOptions& Name(std::string n) { name = std::move(n); return *this; }
};

}  // namespace gpupool

#endif  // GPUPOOL_TASK_OPTIONS_H_
