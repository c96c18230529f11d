// File: gpupool/export.h
//
// libgpupool_runtime is built with hidden symbol visibility: only what a public header marks
// GPUPOOL_API is exported, so the library's internals (and the static libraries inside it) can
// never clash with a program's own symbols.
#ifndef GPUPOOL_EXPORT_H_
#define GPUPOOL_EXPORT_H_

#define GPUPOOL_API __attribute__((visibility("default")))

#endif  // GPUPOOL_EXPORT_H_
