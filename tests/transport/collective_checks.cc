#include "tests/transport/collective_checks.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tests/transport/test_peer_process.h"

namespace gpupool::transport::testing {
namespace {

absl::Span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
absl::Span<std::byte> Bytes(std::string& s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

// Rank r contributes (r + 1) * (i + 1) - 500 at index i; the results follow from the rank count.
template <typename T>
void CheckAllReduce(HostCommunicator& comm, const char* type, size_t n,
                    std::vector<std::string>& failures) {
  const int64_t ranks = comm.size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    std::vector<T> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>((comm.rank() + 1) * int64_t(i + 1) - 500);
    const char* name = op == ReduceOp::kSum ? "sum" : op == ReduceOp::kMax ? "max" : "min";
    if (absl::Status s = comm.AllReduce(absl::MakeSpan(data), op); !s.ok()) {
      failures.push_back(absl::StrCat("allreduce ", name, " ", type, " x", n, ": ", s.ToString()));
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      int64_t k = static_cast<int64_t>(i + 1);
      int64_t want = op == ReduceOp::kSum   ? k * ranks * (ranks + 1) / 2 - 500 * ranks
                     : op == ReduceOp::kMax ? ranks * k - 500
                                            : k - 500;
      if (data[i] != static_cast<T>(want)) {
        failures.push_back(absl::StrCat("allreduce ", name, " ", type, " x", n, " [", i,
                                        "] = ", data[i], ", want ", want));
        break;
      }
    }
  }
}

void CheckBroadcast(HostCommunicator& comm, int root, size_t size,
                    std::vector<std::string>& failures) {
  const std::vector<std::byte> expected = Pattern(size);
  std::vector<std::byte> data(size, std::byte{0});
  if (comm.rank() == root) data = expected;
  if (absl::Status s = comm.Broadcast(root, absl::MakeSpan(data)); !s.ok()) {
    failures.push_back(absl::StrCat("broadcast from ", root, ": ", s.ToString()));
  } else if (Checksum(data) != Checksum(expected)) {
    failures.push_back(absl::StrCat("broadcast from ", root, " of ", size, " bytes differs"));
  }
}

void CheckSendRecvRing(HostCommunicator& comm, std::vector<std::string>& failures) {
  const int n = comm.size();
  const int right = (comm.rank() + 1) % n, left = (comm.rank() - 1 + n) % n;
  // Two messages with one tag, then a large one: arrive in order, whole.
  for (int round = 0; round < 2; ++round) {
    const std::string out = absl::StrCat("from ", comm.rank(), " round ", round);
    absl::Status sent = comm.Send(right, 7, Bytes(out));
    if (!sent.ok()) failures.push_back(absl::StrCat("send: ", sent.ToString()));
  }
  for (int round = 0; round < 2; ++round) {
    std::string in(64, '\0');
    absl::StatusOr<size_t> got = comm.Recv(left, 7, Bytes(in));
    std::string want = absl::StrCat("from ", left, " round ", round);
    if (!got.ok() || in.substr(0, *got) != want) {
      failures.push_back(absl::StrCat("recv round ", round, ": ",
                                      got.ok() ? in.substr(0, *got) : got.status().ToString()));
    }
  }
  const std::vector<std::byte> big = Pattern(3 << 20);
  if (absl::Status s = comm.Send(right, 8, big); !s.ok()) {
    failures.push_back(absl::StrCat("big send: ", s.ToString()));
  }
  std::vector<std::byte> in(big.size());
  absl::StatusOr<size_t> got = comm.Recv(left, 8, absl::MakeSpan(in));
  if (!got.ok() || *got != big.size() || Checksum(in) != Checksum(big)) {
    failures.push_back(absl::StrCat("big recv: ", got.status().ToString()));
  }
}

}  // namespace

std::vector<std::string> RunCollectiveChecks(HostCommunicator& comm) {
  std::vector<std::string> failures;
  CheckAllReduce<float>(comm, "float", 1007, failures);
  CheckAllReduce<double>(comm, "double", 1007, failures);
  CheckAllReduce<int32_t>(comm, "int32", 1007, failures);
  CheckAllReduce<int64_t>(comm, "int64", 1007, failures);
  CheckAllReduce<int64_t>(comm, "int64", 1, failures);          // fewer elements than ranks
  CheckAllReduce<float>(comm, "float", (4 << 20) / 4, failures);  // rendezvous-sized chunks
  CheckBroadcast(comm, comm.size() - 1, 1 << 20, failures);
  CheckBroadcast(comm, 0, 10, failures);
  CheckSendRecvRing(comm, failures);
  return failures;
}

}  // namespace gpupool::transport::testing
