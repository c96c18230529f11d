// File: gpupool/internal/task_submission.h
//
// NOT SUPPORTED API. Installed because Submit, Put, Wait and Cancel (gpupool/runtime.h) expand to
// it; it may change in any release without notice. Include gpupool/runtime.h instead.
//
// The library calls behind the task API's templates. They act on the process's current runtime
// and throw kFailedPrecondition when there is none.
#ifndef GPUPOOL_INTERNAL_TASK_SUBMISSION_H_
#define GPUPOOL_INTERNAL_TASK_SUBMISSION_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "gpupool/export.h"
#include "gpupool/internal/object_header.h"
#include "gpupool/internal/remote_function.h"
#include "gpupool/object_ref.h"
#include "gpupool/task_options.h"

namespace gpupool::detail {

// Returns the task's result, retained for the caller; takes over `args`' references.
// `options` null: the defaults.
GPUPOOL_API ObjectHeader* SubmitTask(const FunctionInfo* function, EncodedArgs args,
                                     const TaskOptions* options);
GPUPOOL_API ObjectHeader* PutValue(std::unique_ptr<ValueBox> value);
GPUPOOL_API void CancelObject(ObjectHeader* object);
// Marks ready[i] for the objects that are ready or failed; returns when at least `num_ready` are,
// or at the deadline. Returns how many are.
GPUPOOL_API size_t WaitObjects(ObjectHeader* const* objects, size_t count, size_t num_ready,
                               std::chrono::steady_clock::time_point deadline, bool* ready);

template <typename F, typename... Args>
auto SubmitWith(F function, const TaskOptions* options, Args&&... args) {
  static_assert(std::is_pointer_v<F> && std::is_function_v<std::remove_pointer_t<F>>,
                "gpupool: Submit takes a registered function (see GPUPOOL_REMOTE)");
  using R = StoredResult<typename FunctionTraits<F>::Result>;
  const FunctionInfo* info = FunctionFor(reinterpret_cast<const void*>(function));
  return ObjectRefAccess::Adopt<R>(
      SubmitTask(info, EncodeArgs<F>(std::forward<Args>(args)...), options));
}

}  // namespace gpupool::detail

#endif  // GPUPOOL_INTERNAL_TASK_SUBMISSION_H_
