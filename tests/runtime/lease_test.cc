// Leases as the job runtime uses them: idle leases go back to the pool after the linger and another
// team gets them (with the memory scrubbed on the way), and a lease lost to a failed GPU makes its
// task run again elsewhere, within max_retries.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpupool/gpupool.h"
#include "gtest/gtest.h"
#include "pool/devices/simulated_driver.h"
#include "runtime/api/testing_seam.h"
#include "runtime/service/pool_service.h"
#include "runtime/tasks/job_runtime.h"
#include "tests/runtime/event_log.h"

namespace {

using ::testing::HasSubstr;

struct Written {
  uint64_t address = 0;
  bool all_zero = false;
};

Written WriteAndFree(gpupool::TaskContext& ctx, int byte) {
  gpupool::DeviceBuffer b = ctx.Allocate(8 << 20);
  std::memset(b.data(), byte, b.size());  // a simulated GPU's memory is host memory
  return Written{reinterpret_cast<uint64_t>(b.data()), false};
}
Written AllocateFresh(gpupool::TaskContext& ctx) {
  gpupool::DeviceBuffer b = ctx.Allocate(8 << 20);
  const unsigned char* p = static_cast<const unsigned char*>(b.data());
  bool zero = true;
  for (uint64_t i = 0; i < b.size(); ++i) zero &= p[i] == 0;
  return Written{reinterpret_cast<uint64_t>(b.data()), zero};
}

std::atomic<int> started_attempts{0};
std::string LoseMyGpu(gpupool::TaskContext& ctx) {
  started_attempts.fetch_add(1);
  std::string where = ctx.slots().front().node + "/" + std::to_string(ctx.slots().front().gpu_index);
  if (ctx.attempt() > 0) return where + " attempt " + std::to_string(ctx.attempt());
  for (int i = 0; i < 20000; ++i) {  // up to 20 s: the test fails the GPU long before
    ctx.Step();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return "never stopped";
}

GPUPOOL_REMOTE(WriteAndFree);
GPUPOOL_REMOTE(AllocateFresh);
GPUPOOL_REMOTE(LoseMyGpu);

using gpupool::testing::EventLog;

TEST(Leases, IdleLeaseGoesBackAndAnotherTeamGetsScrubbedMemory) {
  EventLog log;
  gpupool::RuntimeOptions o;
  o.simulate = "1xH100-80GB";
  o.lease_linger_ms = 50;
  o.on_event = [&](const gpupool::RuntimeEvent& e) { log.Add(e); };
  gpupool::Runtime rt = gpupool::Init(o);
  Written a = *gpupool::Get(gpupool::Task(WriteAndFree).Gpus(1).Team("alpha").Submit(0xAB));
  // The only GPU is alpha's until its lease lingers out; then beta gets it.
  Written b = *gpupool::Get(gpupool::Task(AllocateFresh).Gpus(1).Team("beta").Submit(),
                            std::chrono::seconds(30));
  int returned = log.IndexOf("lease-returned", "alpha");
  int granted = log.IndexOf("lease-granted", "beta");
  ASSERT_GE(returned, 0);
  ASSERT_GE(granted, 0);
  EXPECT_LT(returned, granted);
  EXPECT_EQ(a.address, b.address) << "the cached block was reused";
  EXPECT_TRUE(b.all_zero) << "alpha's bytes reached beta";
  EXPECT_GE(rt.Stats().scrubbed_bytes, 8u << 20);
  // Within one team a reused block is not scrubbed again.
  uint64_t scrubbed = rt.Stats().scrubbed_bytes;
  Written c = *gpupool::Get(gpupool::Task(WriteAndFree).Gpus(1).Team("beta").Submit(1));
  EXPECT_EQ(c.address, b.address);
  EXPECT_EQ(rt.Stats().scrubbed_bytes, scrubbed);
}

// Waits until LoseMyGpu has started on `team`'s lease, then makes that GPU fall off the bus and
// has the pool notice at once. Returns the failed GPU.
gpupool::pool::GpuRef FailTheGpuUnderTheTask(gpupool::Runtime& rt, EventLog& log,
                                             const std::string& team) {
  while (started_attempts.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::string detail = log.LeaseDetail(team);  // "node-0/GPU 1 whole"
  size_t slash = detail.find("/GPU ");
  gpupool::pool::GpuRef failed{detail.substr(0, slash), std::stoi(detail.substr(slash + 5))};
  auto& driver = dynamic_cast<gpupool::pool::SimulatedDriver&>(*gpupool::InternalsForTesting(rt).embedded_pool()->driver());
  EXPECT_TRUE(driver.FallOffBus(failed).ok());
  gpupool::InternalsForTesting(rt).embedded_pool()->PollHealthNow();
  return failed;
}

TEST(Leases, LostGpuMakesTheTaskRunAgainElsewhere) {
  EventLog log;
  gpupool::RuntimeOptions o;
  o.simulate = "2xH100-80GB";
  o.on_event = [&](const gpupool::RuntimeEvent& e) { log.Add(e); };
  gpupool::Runtime rt = gpupool::Init(o);
  started_attempts = 0;
  auto ref = gpupool::Task(LoseMyGpu).Gpus(1).Team("alpha").MaxRetries(1).Submit();
  gpupool::pool::GpuRef failed = FailTheGpuUnderTheTask(rt, log, "alpha");
  std::string where = *gpupool::Get(ref, std::chrono::seconds(30));
  EXPECT_THAT(where, HasSubstr("attempt 1"));
  EXPECT_THAT(where, ::testing::Not(HasSubstr(failed.node + "/" + std::to_string(failed.index) + " ")));
  EXPECT_GE(log.IndexOf("lease-lost", "alpha"), 0);
}

TEST(Leases, RetriesUsedUpFailWithUnavailable) {
  EventLog log;
  gpupool::RuntimeOptions o;
  o.simulate = "2xH100-80GB";
  o.on_event = [&](const gpupool::RuntimeEvent& e) { log.Add(e); };
  gpupool::Runtime rt = gpupool::Init(o);
  started_attempts = 0;
  auto ref = gpupool::Task(LoseMyGpu).Gpus(1).MaxRetries(0).Submit();
  gpupool::pool::GpuRef failed = FailTheGpuUnderTheTask(rt, log, "default");
  try {
    gpupool::Get(ref, std::chrono::seconds(30));
    FAIL();
  } catch (const gpupool::TaskError& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kUnavailable);
    EXPECT_THAT(e.original_message(), HasSubstr("lost"));
  }
}

}  // namespace
