// File: runtime/cli/head_address.h
//
// Which head a client command (`status`, `queue`, `usage`, `savings`) talks to and with which
// token: --pool HOST:PORT or $GPUPOOL_ADDRESS, and --token-file, --token or $GPUPOOL_TOKEN (in
// that order). Throws CommandFailed naming what is missing or malformed.
//
//   HeadFlags flags;
//   AddHeadFlags(subcommand, flags);
//   HeadAddress head = ResolveHead(flags);
#ifndef GPUPOOL_RUNTIME_CLI_HEAD_ADDRESS_H_
#define GPUPOOL_RUNTIME_CLI_HEAD_ADDRESS_H_

#include <cstdint>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace gpupool::cli {

// The flags every client command takes to reach the head.
struct HeadFlags {
  std::string pool;
  std::string token;
  std::string token_file;
};
void AddHeadFlags(CLI::App* command, HeadFlags& flags);

struct HeadAddress {
  std::string host;
  uint16_t port = 0;
  std::string token;
};

HeadAddress ResolveHead(const HeadFlags& flags);

}  // namespace gpupool::cli

#endif  // GPUPOOL_RUNTIME_CLI_HEAD_ADDRESS_H_
