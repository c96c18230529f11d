// File: runtime/rpc/worker_launch_codec.h
//
// Converts a WorkerLaunch (runtime/rpc/worker_launch.h) to and from its wire form in
// runtime/rpc/pool_service.capnp. Decoding treats the message as untrusted, as the head and the
// agent both must: a field too long, too many arguments or variables, a NUL byte in what becomes
// part of an exec (which would silently cut it short), or a variable name holding '=' is an
// InvalidArgument error naming the field. The message's own traversal limit bounds the whole.
#ifndef GPUPOOL_RUNTIME_RPC_WORKER_LAUNCH_CODEC_H_
#define GPUPOOL_RUNTIME_RPC_WORKER_LAUNCH_CODEC_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "runtime/rpc/pool_service.capnp.h"
#include "runtime/rpc/worker_launch.h"

namespace gpupool::rpc {

inline constexpr size_t kMaxWorkerArgs = 4096;        // arguments, and environment variables
inline constexpr size_t kMaxWorkerArgBytes = 65536;   // one argument or variable's value

void EncodeWorkerLaunch(const runtime::WorkerLaunch& launch, WorkerLaunch::Builder out);
absl::StatusOr<runtime::WorkerLaunch> DecodeWorkerLaunch(WorkerLaunch::Reader in);

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_WORKER_LAUNCH_CODEC_H_
