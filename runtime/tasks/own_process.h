// File: runtime/tasks/own_process.h
//
// This process as /proc shows it: what a job's workers are started as (the driver's executable)
// and how a worker knows it is one (its command line).
#ifndef GPUPOOL_RUNTIME_TASKS_OWN_PROCESS_H_
#define GPUPOOL_RUNTIME_TASKS_OWN_PROCESS_H_

#include <string>
#include <vector>

namespace gpupool::runtime {

// The running program's path (/proc/self/exe); empty when it cannot be read.
std::string OwnExecutable();
// argv as the kernel holds it (/proc/self/cmdline), for code that was not handed argv.
std::vector<std::string> OwnCommandLine();

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_OWN_PROCESS_H_
