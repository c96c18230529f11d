// TaskContext's collectives across the ranks of an mpirun job (tests/runtime/CMakeLists.txt runs
// it with 3 ranks, each its own simulated node): every rank submits one GPU task that reduces,
// broadcasts and passes messages round a ring with the other ranks' tasks, and checks every
// value against what it computes alone. Exit status 0 on every rank means all checks held.
//
// With --die-rank=K rank K kills itself (SIGKILL) after the first reduction; the others' next
// collective must fail with kUnavailable naming it (or kDeadlineExceeded), not hang.
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"
#include "tests/runtime/die_rank_flag.h"

namespace {

// Returns "" when every check held, else what failed.
std::string Exchange(gpupool::TaskContext& ctx, int die_rank) {
  const int r = ctx.rank();
  const int n = ctx.ranks();
  std::string failed;
  auto check = [&failed](bool ok, const std::string& what) {
    if (!ok) failed += what + "; ";
  };

  // Sums of integers are exact: element i is the sum over ranks of (rank + 1) * (i + 1).
  std::vector<int64_t> sums(1000);
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = (r + 1) * static_cast<int64_t>(i + 1);
  ctx.AllReduce(sums);
  const int64_t ranks_sum = static_cast<int64_t>(n) * (n + 1) / 2;
  for (size_t i = 0; i < sums.size(); ++i) check(sums[i] == ranks_sum * static_cast<int64_t>(i + 1), "int64 sum");

  if (r == die_rank) DieNow(r);

  // Max and min of doubles; a length that does not divide by the ranks.
  std::vector<double> high(4099), low(4099);
  for (size_t i = 0; i < high.size(); ++i) high[i] = low[i] = r * 0.5 + static_cast<double>(i);
  ctx.AllReduce(high, gpupool::ReduceOp::kMax);
  ctx.AllReduce(low, gpupool::ReduceOp::kMin);
  for (size_t i = 0; i < high.size(); ++i) {
    check(high[i] == (n - 1) * 0.5 + static_cast<double>(i), "double max");
    check(low[i] == static_cast<double>(i), "double min");
  }

  // Float sums of a device buffer (simulated GPU: host memory with the lease's accounting).
  gpupool::DeviceBuffer grads = ctx.Allocate(1 << 20);
  float* g = static_cast<float*>(grads.data());
  const size_t count = grads.size() / sizeof(float);
  for (size_t i = 0; i < count; ++i) g[i] = 0.25f * static_cast<float>(r);
  ctx.AllReduce<float>(grads);
  check(g[0] == 0.25f * static_cast<float>(n * (n - 1) / 2) && g[count - 1] == g[0], "device buffer sum");

  // Broadcast from the last rank.
  std::vector<int32_t> model(257, r == n - 1 ? 42 : -1);
  ctx.Broadcast(n - 1, model);
  for (int32_t v : model) check(v == 42, "broadcast");

  // A ring: send to the next rank, receive from the previous one.
  std::string mine = "from rank " + std::to_string(r);
  ctx.Send((r + 1) % n, 5, mine.data(), mine.size());
  char buffer[64];
  size_t got = ctx.Recv((r + n - 1) % n, 5, buffer, sizeof buffer);
  check(std::string(buffer, got) == "from rank " + std::to_string((r + n - 1) % n), "ring message");
  return failed;
}
GPUPOOL_REMOTE(Exchange);

}  // namespace

int main(int argc, char** argv) {
  const int die_rank = DieRankFlag(argc, argv);
  try {
    gpupool::RuntimeOptions options = gpupool::OptionsFromFlags(argc, argv);
    if (die_rank >= 0) options.collective_timeout_s = 20;
    gpupool::Runtime rt = gpupool::Init(options);
    try {
      std::string failed = *gpupool::Get(gpupool::Task(Exchange).Gpus(0.5).Submit(die_rank));
      if (!failed.empty()) {
        std::printf("rank %d: FAILED: %s\n", rt.rank(), failed.c_str());
        return 1;
      }
      std::printf("rank %d of %d: collectives ok\n", rt.rank(), rt.ranks());
      return die_rank >= 0 ? 1 : 0;  // a death test must not get here
    } catch (const gpupool::TaskError& e) {
      const bool expected = die_rank >= 0 && (e.code() == gpupool::ErrorCode::kUnavailable ||
                                              e.code() == gpupool::ErrorCode::kDeadlineExceeded);
      std::printf("rank %d: %s: %s\n", rt.rank(), expected ? "collective failed as expected" : "FAILED", e.what());
      return expected ? 0 : 1;
    }
  } catch (const gpupool::Error& e) {
    std::fprintf(stderr, "gpupool error: %s\n", e.what());
    return 1;
  }
}
