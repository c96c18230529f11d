#include "runtime/client/fresh_token.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {

absl::StatusOr<std::string> FreshToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[16];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return absl::UnavailableError("cannot read /dev/urandom for a fresh token");
  }
  std::string hex;
  for (unsigned char b : bytes) absl::StrAppend(&hex, absl::Hex(b, absl::kZeroPad2));
  return hex;
}

}  // namespace gpupool::runtime
