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
//   - Cpus(c), HostMemoryMib(m): the host CPU cores and memory a GPU task's lease holds on its
//     node beside the GPUs (a gang's split evenly over them), counted against nodes that declare
//     theirs (`cpus`, `memory_gib` in the pool's configuration). A task asking more than any
//     node has fails at once, with the scheduler's reason. Not for CPU tasks (Gpus(0)): those run
//     on the process's threads and hold nothing in the pool.
// Tasks with the same options share leases: the runtime asks the pool for leases of that shape
// while it has backlog, runs many tasks on each, and hands them back after a short linger.
//
// Placement: Models({...}) limits the GPU models; Label(k, v) requires node labels and
// AvoidLabel(k, v) excludes them; HardwareIsolation() asks for MIG instances or whole GPUs.
// Accounting: Team (whose quota pays), Project and WorkloadClass (free-form), PriorityClass (one of
// the pool's classes: it decides preemption and checkpoint intervals). MaxRetries counts system
// failures (lost leases), not preemptions; Name is what errors show.
//
// The options, their defaults and their setters are declared once, in gpupool/task_option_list.h
// (the same list drives TaskBuilder and the Python keywords). TaskOptions is a plain struct:
// fields may be set directly too (`o.gpus = 0.5; o.labels["zone"] = "a";`).
#ifndef GPUPOOL_TASK_OPTIONS_H_
#define GPUPOOL_TASK_OPTIONS_H_

#include "gpupool/internal/task_option_expansion.h"  // not supported API: the row expansions
#include "gpupool/task_option_list.h"

namespace gpupool {

struct TaskOptions {
  // Fields: `Type field = default;` per row of GPUPOOL_TASK_OPTIONS.
  GPUPOOL_TASK_OPTIONS(GPUPOOL_INTERNAL_TASK_OPTION_FIELD)

  // Chained setters (`Gpus(1).Team("vision")`), named as in the list.
  GPUPOOL_TASK_OPTIONS(GPUPOOL_INTERNAL_TASK_OPTION_SETTER)
};

}  // namespace gpupool

#endif  // GPUPOOL_TASK_OPTIONS_H_
