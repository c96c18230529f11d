// File: gpupool/remote.h
//
// Remote functions: plain functions registered by name, so any process of the job (the same
// binary on every rank) can run them. One macro at namespace scope, as Ray's RAY_REMOTE:
//
//   int Square(int x) { return x * x; }
//   float Score(gpupool::TaskContext& ctx, const std::vector<float>& batch) { ... }
//   GPUPOOL_REMOTE(Square);
//   GPUPOOL_REMOTE(Score);
//
// Parameters are taken by value or by const reference and must be encodable (gpupool/codec.h).
// A first parameter of type `gpupool::TaskContext&` receives the task's context. A function
// returning void produces an ObjectRef<gpupool::Nothing>. Submitting a function that was never
// registered throws kNotFound naming the fix.
//
// Registration happens during static initialisation, once per process, under the name as spelled
// (`GPUPOOL_REMOTE(ns::Train)` registers "ns::Train"): every rank of a job must register the same
// functions under the same names, which running one binary everywhere gives. Registering one name
// for two different functions throws kAlreadyExists from the static initialiser (the program stops
// before main). An overloaded name does not compile: register a wrapper with a name of its own.
//
// Arguments are encoded when the task is submitted, so the caller may change or drop its own
// copies at once; an ObjectRef<T> given where the function takes T is a dependency (the task
// starts when the object exists and reads it in place, without a copy, for a `const T&`).
#ifndef GPUPOOL_REMOTE_H_
#define GPUPOOL_REMOTE_H_

#include "gpupool/codec.h"
#include "gpupool/internal/remote_function.h"  // not supported API: what GPUPOOL_REMOTE expands to
#include "gpupool/object_ref.h"
#include "gpupool/task_context.h"

#define GPUPOOL_REMOTE_CONCAT_INNER(a, b) a##b
#define GPUPOOL_REMOTE_CONCAT(a, b) GPUPOOL_REMOTE_CONCAT_INNER(a, b)
// Registers `fn` (a function, possibly namespace-qualified) under its spelled name.
#define GPUPOOL_REMOTE(fn)                                                                 \
  [[maybe_unused]] static const ::gpupool::detail::FunctionInfo* const GPUPOOL_REMOTE_CONCAT( \
      gpupool_remote_registration_, __COUNTER__) =                                         \
      ::gpupool::detail::RegisterFunction(#fn, reinterpret_cast<const void*>(&fn),         \
                                          &::gpupool::detail::Invoke<&fn>,                  \
                                          &::gpupool::detail::DecodeResult<&fn>)

#endif  // GPUPOOL_REMOTE_H_
