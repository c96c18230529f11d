// File: runtime/tasks/status_to_error.h
//
// Where a Status becomes an exception: an absl::Status from inside becomes a thrown gpupool::Error
// with the same code and message. The API's implementation throws at its edge with it, and so does
// the task layer where it runs inside a task's call (checkpoints, Submit's caller errors).
#ifndef GPUPOOL_RUNTIME_TASKS_STATUS_TO_ERROR_H_
#define GPUPOOL_RUNTIME_TASKS_STATUS_TO_ERROR_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpupool/error.h"

namespace gpupool::runtime {

inline void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  throw Error(static_cast<ErrorCode>(status.code()), std::string(status.message()));
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_STATUS_TO_ERROR_H_
