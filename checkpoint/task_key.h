// File: checkpoint/task_key.h
//
// A task key names one task's snapshot directory under the store's root, so it must be a single,
// harmless path component: the runtime forms it from the task's identity (e.g. "job-3.task-17").
//
//   absl::Status s = ValidateTaskKey("job-3.task-17");   // OK
//   ValidateTaskKey("../etc")  // InvalidArgument naming the key and what is wrong with it
#ifndef GPUPOOL_CHECKPOINT_TASK_KEY_H_
#define GPUPOOL_CHECKPOINT_TASK_KEY_H_

#include <cstddef>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace gpupool::checkpoint {

// Leaves room under NAME_MAX (255) for nothing else: the key is the whole directory name.
inline constexpr size_t kMaxTaskKeyBytes = 200;

// OK for 1..kMaxTaskKeyBytes bytes of printable ASCII other than '/' and '\\', not starting with
// '.' (so "." and ".." and hidden names are out) and not containing "..". Otherwise
// InvalidArgument naming the key (escaped) and the rule it breaks.
absl::Status ValidateTaskKey(absl::string_view key);

}  // namespace gpupool::checkpoint

#endif  // GPUPOOL_CHECKPOINT_TASK_KEY_H_
