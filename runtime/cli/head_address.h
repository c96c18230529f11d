// File: runtime/cli/head_address.h
//
// Which head a client command (`status`, `queue`, `usage`) talks to and with which token:
// --pool HOST:PORT or $GPUPOOL_ADDRESS, and --token-file, --token or $GPUPOOL_TOKEN (in that
// order). Throws CommandFailed naming what is missing or malformed.
//
//   HeadAddress head = ResolveHead(flags.pool, flags.token, flags.token_file);
#ifndef GPUPOOL_RUNTIME_CLI_HEAD_ADDRESS_H_
#define GPUPOOL_RUNTIME_CLI_HEAD_ADDRESS_H_

#include <cstdint>
#include <string>

namespace gpupool::cli {

struct HeadAddress {
  std::string host;
  uint16_t port = 0;
  std::string token;
};

HeadAddress ResolveHead(const std::string& pool, const std::string& token, const std::string& token_file);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_HEAD_ADDRESS_H_
