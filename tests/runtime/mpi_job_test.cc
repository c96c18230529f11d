// An mpirun job (tests/runtime/CMakeLists.txt runs it under mpiexec): every rank calls Init,
// rank 0 hosts the job's head, every rank is its own node's agent, and each rank's tasks run on
// its own node's GPUs. With --die-rank=K, rank K is killed (SIGKILL) after its first tasks and
// the other ranks must go on submitting and finishing tasks: MPI is not used after bootstrap.
//
// Prints one line per rank, which the death test's script checks:
//   "rank R on rank-R: N tasks ok" then "rank R survived" (or "rank R dying").
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpupool/gpupool.h"
#include "tests/runtime/die_rank_flag.h"

namespace {

std::string NodeOf(gpupool::TaskContext& ctx) { return ctx.slots().at(0).node; }
GPUPOOL_REMOTE(NodeOf);

// Submits `n` fractional-GPU tasks and checks each ran on `node`; returns how many did.
int RunOnMyNode(int n, const std::string& node) {
  std::vector<gpupool::ObjectRef<std::string>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(gpupool::Task(NodeOf).Gpus(0.25).Submit());
  int ok = 0;
  for (auto& r : refs) {
    std::string where = *gpupool::Get(r);
    if (where == node) {
      ++ok;
    } else {
      std::fprintf(stderr, "task ran on %s, not on its rank's node %s\n", where.c_str(), node.c_str());
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int die_rank = DieRankFlag(argc, argv);
  try {
    gpupool::Runtime rt = gpupool::Init(argc, argv);
    const int rank = rt.rank();
    const std::string expected = "rank-" + std::to_string(rank);
    if (rt.ranks() < 2 || rt.node() != expected) {
      std::fprintf(stderr, "rank %d of %d thinks it is on node '%s'\n", rank, rt.ranks(), rt.node().c_str());
      return 1;
    }
    const int n = 16;
    int ok = RunOnMyNode(n, expected);
    std::printf("rank %d on %s: %d tasks ok\n", rank, expected.c_str(), ok);
    std::fflush(stdout);
    if (ok != n) return 1;
    if (rank == die_rank) DieNow(rank);
    if (die_rank >= 0) {
      // The killed rank's node goes down at the head; everyone else carries on.
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ok = RunOnMyNode(n, expected);
      if (ok != n) return 1;
      std::printf("rank %d survived\n", rank);
      std::fflush(stdout);
    }
    return 0;
  } catch (const gpupool::Error& e) {
    std::fprintf(stderr, "gpupool error: %s\n", e.what());
    return 1;
  }
}
