// File: runtime/rpc/node_codec.h
//
// A node as its agent discovered it (pool::DiscoveredNode), on the wire: what an agent (or an
// mpirun rank) sends the head when it registers, and what a job process gets back when it asks
// which GPUs it runs on. It travels as a PoolInventory (runtime/rpc/pool_inventory.capnp), the
// same message `gpupool status` reads, so there is one wire form of a GPU.
//
// Decoding treats the bytes as untrusted (the limits and errors of inventory_codec.h).
#ifndef GPUPOOL_RUNTIME_RPC_NODE_CODEC_H_
#define GPUPOOL_RUNTIME_RPC_NODE_CODEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpupool/pool_description.h"
#include "pool/devices/device_driver.h"
#include "pool/health.h"
#include "pool/inventory.h"

namespace gpupool::rpc {

struct DiscoveredPool {
  std::string driver;  // "nvidia" or "simulated"
  std::vector<pool::DiscoveredNode> nodes;
};

std::string EncodeNodes(const DiscoveredPool& pool);

// The public enums and the pool's (the same states; the pool layer cannot see the public API).
// The pool's MigModeName and HealthStateName are the one table of their names.
gpupool::MigMode FromPool(pool::MigMode mode);
pool::MigMode ToPool(gpupool::MigMode mode);
gpupool::HealthState FromPool(pool::HealthState state);
pool::HealthState ToPool(gpupool::HealthState state);

// A discovered GPU as the public GpuInfo, with what discovery knows (island node-local, health
// as discovered); DescribePool adds the pool's view on top.
GpuInfo GpuInfoOf(const pool::DiscoveredGpu& gpu);
absl::StatusOr<DiscoveredPool> DecodeNodes(absl::string_view bytes);

// The nodes of an inventory as they were discovered (all of them, or the one named `only`).
std::vector<pool::DiscoveredNode> DiscoveredNodes(const pool::Inventory& inventory, const std::string& only = "");

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_NODE_CODEC_H_
