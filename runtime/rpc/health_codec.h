// File: runtime/rpc/health_codec.h
//
// A GPU's health state on the wire (Inventory.Health), for the agent's reports and the head's
// heartbeat answers. The wire's numbers are its own (quarantined and failed came after lost), so
// a state never travels as the pool enum's number.
#ifndef GPUPOOL_RUNTIME_RPC_HEALTH_CODEC_H_
#define GPUPOOL_RUNTIME_RPC_HEALTH_CODEC_H_

#include <cstdint>
#include <optional>

#include "pool/health.h"
#include "runtime/rpc/pool_inventory.capnp.h"

namespace gpupool::rpc {

Health HealthToWire(pool::HealthState state);
// nullopt for a value this build does not know (a newer peer's).
std::optional<pool::HealthState> HealthFromWire(uint16_t wire);

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_HEALTH_CODEC_H_
