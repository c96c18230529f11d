// File: runtime/objects/host_memory.h
//
// Large host values and the page-fault tax. glibc serves every allocation above 32 MiB with a
// fresh mmap and unmaps it on free, so each Put of a 100 MiB value by copy first makes the kernel
// fault in and zero 25,600 new pages: measured here, that copy runs at a fifth of memcpy speed.
// Reusing freed memory removes the tax (what Ray's plasma store gets by preallocating its arena).
//
// The runtime therefore asks glibc, once per process, to serve large blocks from its heaps
// (M_MMAP_MAX = 0) and to keep up to `retain_bytes` of freed memory at the top of the heap
// (M_TRIM_THRESHOLD). The cost, stated plainly: these are process-wide malloc settings, and
// freed large blocks below the top of the heap stay mapped until reused, so the process's RSS
// follows the peak of its large live values rather than falling after each free.
// RuntimeOptions::host_memory_reuse_mib = 0 (GPUPOOL_HOST_MEMORY_REUSE_MIB=0) leaves malloc alone.
#ifndef GPUPOOL_RUNTIME_OBJECTS_HOST_MEMORY_H_
#define GPUPOOL_RUNTIME_OBJECTS_HOST_MEMORY_H_

#include <cstdint>

namespace gpupool::runtime {

// Returns false when the allocator refused (not glibc, or a setting out of range).
bool ReuseLargeHostAllocations(uint64_t retain_bytes);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_OBJECTS_HOST_MEMORY_H_
