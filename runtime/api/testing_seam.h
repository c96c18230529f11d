// File: runtime/api/testing_seam.h
//
// The test-only way into a Runtime's implementation, for gpupool's own tests and benches (fault
// injection through the embedded pool's simulated driver, the pool's health poll):
//
//   gpupool::Runtime rt = gpupool::Init(options);
//   gpupool::runtime::JobRuntime& job = gpupool::InternalsForTesting(rt);
//   job.embedded_pool()->PollHealthNow();
//
// Not part of the public API and not installed: the public Runtime has no accessor that returns
// an internal type. Link the runtime's layers (gpupool_runtime_internals), as the tests do; the
// function is not exported from libgpupool_runtime.
#ifndef GPUPOOL_RUNTIME_API_TESTING_SEAM_H_
#define GPUPOOL_RUNTIME_API_TESTING_SEAM_H_

#include "gpupool/runtime.h"
#include "runtime/tasks/job_runtime.h"

namespace gpupool {

// The runtime `rt` owns; valid while `rt` lives. Thread-safety: JobRuntime's (thread-safe).
runtime::JobRuntime& InternalsForTesting(Runtime& rt);

}  // namespace gpupool

#endif  // GPUPOOL_RUNTIME_API_TESTING_SEAM_H_
