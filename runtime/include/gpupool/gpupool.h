// File: gpupool/gpupool.h
//
// The public C++ API of gpupool, in one include. Link libgpupool_runtime:
//
//   find_package(gpupool REQUIRED)
//   target_link_libraries(my_program PRIVATE gpupool::runtime)
//
// runtime.h is the task API (Init, Submit, Get, Wait, Put, Cancel) and says which calls are
// thread-safe and which a task may make; remote.h registers functions; task_options.h says what a
// task needs (the options themselves are listed in task_option_list.h); task_context.h is what a
// running task sees; object_ref.h is the refs and views of stored values; codec.h makes your types
// travel; pool_description.h describes the pool's GPUs.
//
// Headers under gpupool/internal/ are installed because the templates above expand to them; they
// are not supported API and change without notice.
#ifndef GPUPOOL_GPUPOOL_H_
#define GPUPOOL_GPUPOOL_H_

#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "gpupool/object_ref.h"
#include "gpupool/pool_description.h"
#include "gpupool/remote.h"
#include "gpupool/runtime.h"
#include "gpupool/task_context.h"
#include "gpupool/task_options.h"
#include "gpupool/version.h"

#endif  // GPUPOOL_GPUPOOL_H_
