// Runs under mpiexec with several ranks (tests/transport/CMakeLists.txt): each rank checks what
// the bootstrap collectives return. Exits non-zero, naming the failed check, on any rank.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "transport/mpi_bootstrap.h"

namespace {

int failures = 0;

void Expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
    ++failures;
  }
}

}  // namespace

int main() {
  using gpupool::transport::MpiBootstrap;
  if (!gpupool::transport::LaunchedByMpi()) {
    std::fprintf(stderr, "LaunchedByMpi() is false under mpiexec\n");
    return 1;
  }
  auto mpi = MpiBootstrap::Start();
  if (!mpi.ok()) {
    std::fprintf(stderr, "Start: %s\n", mpi.status().ToString().c_str());
    return 1;
  }
  MpiBootstrap& b = **mpi;
  const int rank = b.rank();
  Expect(b.size() >= 2, "at least two ranks", rank);
  Expect(!b.host().empty(), "a host name", rank);

  // Variable-length strings, one empty, gathered in rank order.
  std::string mine = rank == 1 ? "" : absl::StrCat("rank-", rank, std::string(rank * 1000, 'x'));
  auto all = b.AllGather(mine);
  Expect(all.ok(), "AllGather ok", rank);
  if (all.ok()) {
    Expect(static_cast<int>(all->size()) == b.size(), "one string per rank", rank);
    for (int r = 0; r < static_cast<int>(all->size()); ++r) {
      std::string want = r == 1 ? "" : absl::StrCat("rank-", r, std::string(r * 1000, 'x'));
      Expect((*all)[r] == want, absl::StrCat("AllGather entry ", r), rank);
    }
  }

  auto address = b.Broadcast(rank == 0 ? "127.0.0.1:4242" : "ignored", 0);
  Expect(address.ok() && *address == "127.0.0.1:4242", "Broadcast from rank 0", rank);
  auto from_last = b.Broadcast(absl::StrCat("from ", rank), b.size() - 1);
  Expect(from_last.ok() && *from_last == absl::StrCat("from ", b.size() - 1), "Broadcast from the last rank", rank);
  Expect(!b.Broadcast("x", b.size()).ok(), "Broadcast from a rank that does not exist is refused", rank);

  Expect(b.Barrier().ok(), "Barrier", rank);
  b.Finish();
  Expect(!b.Barrier().ok(), "no MPI call after Finish", rank);
  if (failures == 0 && rank == 0) std::printf("mpi bootstrap: %d ranks ok\n", b.size());
  return failures == 0 ? 0 : 1;
}
