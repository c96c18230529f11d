#include "runtime/cli/head_address.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "runtime/cli/command.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::cli {

void AddHeadFlags(CLI::App* command, HeadFlags& flags) {
  command->add_option("--pool", flags.pool, "the head's HOST:PORT (default: $GPUPOOL_ADDRESS)");
  command->add_option("--token-file", flags.token_file, "file holding the operators', a team's or the agents' token");
  command->add_option("--token", flags.token, "the token itself (default: $GPUPOOL_TOKEN)");
}

HeadAddress ResolveHead(const HeadFlags& flags) {
  const std::string& token_file = flags.token_file;
  std::string address = flags.pool;
  if (address.empty()) {
    if (const char* env = std::getenv("GPUPOOL_ADDRESS")) address = env;
  }
  if (address.empty()) throw CommandFailed("which head? give --pool HOST:PORT (or set GPUPOOL_ADDRESS)");
  HeadAddress head;
  if (absl::Status st = runtime::ParseHostPort(address, &head.host, &head.port); !st.ok()) {
    throw CommandFailed(std::string(st.message()));
  }
  head.token = flags.token;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) throw CommandFailed(absl::StrCat("cannot read the token file '", token_file, "'"));
    std::stringstream s;
    s << in.rdbuf();
    head.token = std::string(absl::StripAsciiWhitespace(s.str()));
  }
  if (head.token.empty()) {
    if (const char* env = std::getenv("GPUPOOL_TOKEN")) head.token = env;
  }
  return head;
}

}  // namespace gpupool::cli
