// TaskContext's collectives in a job of one process: the job is one rank, so a reduction leaves
// the data as it is, a broadcast from rank 0 is a no-op, and a rank may send to itself. The
// many-rank behaviour runs under mpirun (mpi_collectives_test.cc).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpupool/gpupool.h"
#include "gtest/gtest.h"

namespace {

// The code `call` throws, or 0 when it returns.
template <typename Call>
int CodeOf(Call&& call) {
  try {
    call();
    return 0;
  } catch (const gpupool::Error& e) {
    return static_cast<int>(e.code());
  }
}

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
  auto code_of = [&codes](auto&& call) { codes.push_back(CodeOf(call)); };
  char buffer[4];
  code_of([&] { ctx.Recv(0, 1, buffer, sizeof buffer); });                 // nothing sent: never arrives
  code_of([&] { ctx.Send(1, 1, "x", 1); });                                // no rank 1
  code_of([&] { ctx.Send(0, uint64_t{1} << 63, "x", 1); });                // reserved tag
  code_of([&] { ctx.Send(0, 2, "toolong", 7); ctx.Recv(0, 2, buffer, 4); });  // too big for the buffer
  code_of([&] { int32_t v[2] = {1, 2}; ctx.Broadcast(-1, v, sizeof v); });  // no rank -1
  return codes;
}
GPUPOOL_REMOTE(Misuse);

// A gang of four simulated GPUs: one buffer per slot, reduced across the slots (staged through
// host memory: NCCL does not serve simulated GPUs). Slot s holds i + 10*s; the sum is 4i + 60.
std::vector<int64_t> GangSum(gpupool::TaskContext& ctx, int n) {
  std::vector<gpupool::DeviceBuffer> buffers;
  for (size_t s = 0; s < ctx.slots().size(); ++s) {
    buffers.push_back(ctx.Allocate(n * sizeof(int64_t), s));
    auto* v = static_cast<int64_t*>(buffers.back().data());  // host memory on a simulated GPU
    for (int i = 0; i < n; ++i) v[i] = i + 10 * static_cast<int64_t>(s);
  }
  ctx.AllReduceAcrossSlots<int64_t>(buffers);
  std::vector<int64_t> result(n);
  for (const gpupool::DeviceBuffer& b : buffers) {  // every slot holds the same result
    if (std::memcmp(b.data(), buffers[0].data(), b.size()) != 0) throw gpupool::Error(gpupool::ErrorCode::kInternal, "slots differ");
  }
  std::memcpy(result.data(), buffers[0].data(), buffers[0].size());
  return result;
}
GPUPOOL_REMOTE(GangSum);

// Misuse of the slots' reduction: the codes thrown, in order.
std::vector<int> SlotsMisuse(gpupool::TaskContext& ctx) {
  std::vector<int> codes;
  auto code_of = [&codes](auto&& call) { codes.push_back(CodeOf(call)); };
  code_of([&] { ctx.Allocate(64, 2); });  // a lease of two slots has no slot 2
  code_of([&] {
    std::vector<gpupool::DeviceBuffer> one;
    one.push_back(ctx.Allocate(64, 0));
    ctx.AllReduceAcrossSlots<float>(one);  // one buffer for two slots
  });
  code_of([&] {
    std::vector<gpupool::DeviceBuffer> swapped;
    swapped.push_back(ctx.Allocate(64, 1));
    swapped.push_back(ctx.Allocate(64, 0));
    ctx.AllReduceAcrossSlots<float>(swapped);  // buffer 0 is on slot 1's GPU
  });
  code_of([&] {
    std::vector<gpupool::DeviceBuffer> sizes;
    sizes.push_back(ctx.Allocate(64, 0));
    sizes.push_back(ctx.Allocate(128, 1));
    ctx.AllReduceAcrossSlots<float>(sizes);  // not one size
  });
  return codes;
}
GPUPOOL_REMOTE(SlotsMisuse);

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

TEST(Collectives, AGangLeaseReducesOneBufferPerSlotAcrossItsGpus) {
  gpupool::RuntimeOptions o = OneGpu();
  o.simulate = "4xH100-80GB";
  gpupool::Runtime rt = gpupool::Init(o);
  std::vector<int64_t> sums = *gpupool::Get(gpupool::Task(GangSum).Gpus(4).Submit(1000));
  ASSERT_EQ(sums.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sums[i], 4 * i + 60) << "element " << i;
}

TEST(Collectives, MisuseOfTheSlotsReductionIsRefusedWithTheReason) {
  gpupool::RuntimeOptions o = OneGpu();
  o.simulate = "2xH100-80GB";
  gpupool::Runtime rt = gpupool::Init(o);
  std::vector<int> codes = *gpupool::Get(gpupool::Task(SlotsMisuse).Gpus(2).Submit());
  std::vector<int> expected = {static_cast<int>(gpupool::ErrorCode::kOutOfRange),
                               static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
                               static_cast<int>(gpupool::ErrorCode::kInvalidArgument),
                               static_cast<int>(gpupool::ErrorCode::kInvalidArgument)};
  EXPECT_EQ(codes, expected);
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
