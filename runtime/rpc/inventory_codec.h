// File: runtime/rpc/inventory_codec.h
//
// Converts the public PoolDescription to and from its Cap'n Proto wire form
// (runtime/rpc/pool_inventory.capnp). Agents send their node this way; the head and `gpupool
// status` read it. Decoding treats the bytes as untrusted: a message that is not a valid
// PoolInventory, or is larger than the limit, is an InvalidArgument error, never a crash.
#ifndef GPUPOOL_RUNTIME_RPC_INVENTORY_CODEC_H_
#define GPUPOOL_RUNTIME_RPC_INVENTORY_CODEC_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "gpupool/pool_description.h"

namespace gpupool::rpc {

// Upper bound on an encoded inventory: ~1,000 nodes of 8 GPUs fit with room to spare.
inline constexpr size_t kMaxInventoryBytes = 64 << 20;

std::string EncodeInventory(const PoolDescription& pool);
absl::StatusOr<PoolDescription> DecodeInventory(absl::string_view bytes);

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_INVENTORY_CODEC_H_
