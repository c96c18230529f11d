// File: gpupool/gpupool.h
//
// The public C++ API of gpupool, in one include. Link libgpupool_runtime:
//
//   find_package(gpupool REQUIRED)
//   target_link_libraries(my_program PRIVATE gpupool::runtime)
//
// Today the API describes the pool (DescribePool); the task API (Init, Submit, ObjectRef, Get)
// joins it as the runtime grows.
#ifndef GPUPOOL_GPUPOOL_H_
#define GPUPOOL_GPUPOOL_H_

#include "gpupool/error.h"
#include "gpupool/pool_description.h"
#include "gpupool/version.h"

#endif  // GPUPOOL_GPUPOOL_H_
