// File: runtime/client/gpu_operations.h
//
// An operator's word on a running head's GPUs (`gpupool gpu drain|resume|repaired`,
// `gpupool node drain|resume`): one RPC, refused unless `token` is the operators'.
//
//   absl::StatusOr<std::string> what = OperateHeadGpus(host, port, token, {.action = "drain",
//       .node = "node-0", .gpu = 1, .reason = "fan noise", .who = "alice"});
#ifndef GPUPOOL_RUNTIME_CLIENT_GPU_OPERATIONS_H_
#define GPUPOOL_RUNTIME_CLIENT_GPU_OPERATIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gpupool::runtime {

struct GpuOperation {
  std::string action;  // "drain", "resume" or "repaired"
  std::string node;
  int gpu = -1;        // -1: every GPU of the node
  std::string reason;
  std::string who;     // the operator, for the journal
};

// What changed, one line per GPU ("node-0/1: healthy -> draining"). kUnavailable when the head
// cannot be reached; kPermissionDenied for a token that is not the operators'; the head's
// refusal otherwise (an unknown node or GPU, a resume of a failed GPU).
absl::StatusOr<std::string> OperateHeadGpus(const std::string& host, uint16_t port, const std::string& token,
                                            const GpuOperation& op);

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_GPU_OPERATIONS_H_
