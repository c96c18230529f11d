#include "runtime/cli/head_address.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "runtime/cli/command.h"
#include "runtime/rpc/rpc_connection.h"

namespace gpupool::cli {

HeadAddress ResolveHead(const std::string& pool, const std::string& token_flag, const std::string& token_file) {
  std::string address = pool;
  if (address.empty()) {
    if (const char* env = std::getenv("GPUPOOL_ADDRESS")) address = env;
  }
  if (address.empty()) throw CommandFailed("which head? give --pool HOST:PORT (or set GPUPOOL_ADDRESS)");
  HeadAddress head;
  if (absl::Status st = runtime::ParseHostPort(address, &head.host, &head.port); !st.ok()) {
    throw CommandFailed(std::string(st.message()));
  }
  head.token = token_flag;
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
