// TaskContext's collectives in a job of one process: the job is one rank, so a reduction leaves
// the data as it is, a broadcast from rank 0 is a no-op, and a rank may send to itself. The
// many-rank behaviour runs under mpirun (mpi_collectives_test.cc).
#include <cstdint>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"
#include "gtest/gtest.h"

namespace {

std::vector<double> ReduceAlone(gpupool::TaskContext& ctx, std::vector<double> values) {
  if (ctx.rank() != 0 || ctx.ranks() != 1) throw gpupool::Error(gpupool::ErrorCode::kInternal, "not a group of one");
  ctx.AllReduce(values, gpupool::ReduceOp::kMax);
  ctx.Broadcast(0, values);
  return values;
}
GPUPOOL_REMOTE(ReduceAlone);

// Sends two messages with one tag and one with another to itself, then receives them.
std::string SendToSelf(gpupool::TaskContext& ctx) {
  ctx.Send(0, 7, "first", 5);
  ctx.Send(0, 7, "second", 6);
  ctx.Send(0, 9, "other", 5);
  std::string got;
  char buffer[16];
  for (uint64_t tag : {9, 7, 7}) {
    size_t n = ctx.Recv(0, tag, buffer, sizeof buffer);
    got += std::string(buffer, n) + ";";
  }
  return got;
}
GPUPOOL_REMOTE(SendToSelf);

// Each misuse in turn; returns the codes thrown, in order.
std::vector<int> Misuse(gpupool::TaskContext& ctx) {
  std::vector<int> codes;
  auto code_of = [&codes](auto&& call) {
    try {
      call();
      codes.push_back(0);
    } catch (const gpupool::Error& e) {
      codes.push_back(static_cast<int>(e.code()));
    }
  };
  char buffer[4];
  code_of([&] { ctx.Recv(0, 1, buffer, sizeof buffer); });                 // nothing sent: never arrives
  code_of([&] { ctx.Send(1, 1, "x", 1); });                                // no rank 1
  code_of([&] { ctx.Send(0, uint64_t{1} << 63, "x", 1); });                // reserved tag
  code_of([&] { ctx.Send(0, 2, "toolong", 7); ctx.Recv(0, 2, buffer, 4); });  // too big for the buffer
  code_of([&] { int32_t v[2] = {1, 2}; ctx.Broadcast(-1, v, sizeof v); });  // no rank -1
  return codes;
}
GPUPOOL_REMOTE(Misuse);

gpupool::RuntimeOptions OneGpu() {
  gpupool::RuntimeOptions o;
  o.simulate = "1xH100-80GB";
  o.cpu_workers = 1;
  o.lease_linger_ms = 20;
  return o;
}

TEST(Collectives, AJobOfOneProcessIsOneRank) {
  gpupool::Runtime rt = gpupool::Init(OneGpu());
  EXPECT_EQ(rt.ranks(), 1);
  std::vector<double> in = {1.5, -2.0, 3.25};
  EXPECT_EQ(*gpupool::Get(gpupool::Task(ReduceAlone).Gpus(0.5).Submit(in)), in);
}

TEST(Collectives, ARankMaySendToItselfInOrderPerTag) {
  gpupool::Runtime rt = gpupool::Init(OneGpu());
  EXPECT_EQ(*gpupool::Get(gpupool::Task(SendToSelf).Submit()), "other;first;second;");
}

TEST(Collectives, MisuseIsRefusedWithTheReason) {
  gpupool::Runtime rt = gpupool::Init(OneGpu());
  std::vector<int> codes = *gpupool::Get(gpupool::Task(Misuse).Submit());
  std::vector<int> expected = {static_cast<int>(gpupool::ErrorCode::kFailedPrecondition),
                               static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
                               static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
                               static_cast<int>(gpupool::ErrorCode::kOutOfRange),
                               static_cast<int>(gpupool::ErrorCode::kInvalidArgument)};
  EXPECT_EQ(codes, expected);
}

}  // namespace
