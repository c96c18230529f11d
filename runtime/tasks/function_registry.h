// File: runtime/tasks/function_registry.h
//
// The runtime's own lookups in the table of remote functions (GPUPOOL_REMOTE registers them;
// gpupool/remote.h has the public half).
#ifndef GPUPOOL_RUNTIME_TASKS_FUNCTION_REGISTRY_H_
#define GPUPOOL_RUNTIME_TASKS_FUNCTION_REGISTRY_H_

#include <string_view>

#include "gpupool/remote.h"

namespace gpupool::detail {

// The function registered under `name`, or nullptr (another program, or another build of it).
const FunctionInfo* FunctionNamed(std::string_view name);

}  // namespace gpupool::detail

#endif  // GPUPOOL_RUNTIME_TASKS_FUNCTION_REGISTRY_H_
