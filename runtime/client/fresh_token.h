// File: runtime/client/fresh_token.h
//
// A fresh secret: 128 bits from the kernel's generator, as 32 hex characters. What an mpirun job's
// head gives its agents and teams, the key its ranks read each other's objects with, and the key
// a job reclaims its leases with after its connection to the head was lost.
#ifndef GPUPOOL_RUNTIME_CLIENT_FRESH_TOKEN_H_
#define GPUPOOL_RUNTIME_CLIENT_FRESH_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"

namespace gpupool::runtime {

// Unavailable when /dev/urandom cannot be read.
absl::StatusOr<std::string> FreshToken();

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_FRESH_TOKEN_H_
