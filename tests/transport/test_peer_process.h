// File: tests/transport/test_peer_process.h
//
// What the transport tests share: a real peer process (the ucx_test_peer binary, started with
// fork+exec so no UCX state crosses the fork) that prints its worker address and the objects it
// serves on stdout, and the deterministic object contents and checksums both sides compute.
#ifndef GPUPOOL_TESTS_TRANSPORT_TEST_PEER_PROCESS_H_
#define GPUPOOL_TESTS_TRANSPORT_TEST_PEER_PROCESS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace gpupool::transport::testing {

// The id under which ucx_test_peer serves a patterned object of `size` bytes.
std::string PatternId(size_t size);
// Fills `out` with the pattern for `size` (a splitmix64 stream seeded by the size).
void FillPattern(absl::Span<std::byte> out);
std::vector<std::byte> Pattern(size_t size);
uint64_t Checksum(absl::Span<const std::byte> bytes);  // XXH64

std::string HexEncode(absl::string_view bytes);
absl::StatusOr<std::string> HexDecode(absl::string_view hex);

// A child running tests/transport/ucx_test_peer.cc. Its stdin is a pipe: closing it (or
// destroying this object) asks it to exit; Kill() sends SIGKILL.
class PeerProcess {
 public:
  // Starts `ucx_test_peer args...` and reads its "address" line (and "object" lines, for an
  // owner) up to "ready".
  static absl::StatusOr<std::unique_ptr<PeerProcess>> Start(std::vector<std::string> args,
                                                            absl::Duration timeout =
                                                                absl::Seconds(10));
  ~PeerProcess();

  const std::string& address() const { return address_; }  // raw UCX worker address
  // Checksums of the objects the owner serves, by id.
  const std::map<std::string, uint64_t>& checksums() const { return checksums_; }
  pid_t pid() const { return pid_; }
  // Next line of the child's stdout, without the newline; Unavailable at EOF or timeout.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Writes `line` and a newline to the child's stdin.
  bool WriteLine(absl::string_view line);
  void Kill();
  // Waits for the child to exit; returns its wait status.
  int Wait();

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  std::string buffered_;
  std::string address_;
  std::map<std::string, uint64_t> checksums_;
  bool reaped_ = false;
};

}  // namespace gpupool::transport::testing

#endif  // GPUPOOL_TESTS_TRANSPORT_TEST_PEER_PROCESS_H_
