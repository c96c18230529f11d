// File: gpupool/version.h
//
// The library's version, for programs that want to log it or check compatibility.
//
//   std::cout << "gpupool " << gpupool::Version() << "\n";
#ifndef GPUPOOL_VERSION_H_
#define GPUPOOL_VERSION_H_

#include "gpupool/export.h"

namespace gpupool {

// "0.1.0": semantic version of libgpupool_runtime.
GPUPOOL_API const char* Version();

}  // namespace gpupool

#endif  // GPUPOOL_VERSION_H_
