#include "pool/sim/timed_replay.h"

#include <gtest/gtest.h>

namespace gpupool::pool::sim {
namespace {

PodSpec Pod(std::string name, int num_gpu, int milli, int64_t created, int64_t runtime,
            std::string qos = "BE") {
  PodSpec p;
  p.name = std::move(name);
  p.cpu_milli = 1000;
  p.memory_mib = 1024;
  p.num_gpu = num_gpu;
  p.gpu_milli = milli;
  p.qos = std::move(qos);
  p.creation_time = created;
  p.scheduled_time = created;
  p.deletion_time = created + runtime;
  return p;
}

std::vector<NodeCapacity> OneNode() { return {{"n0", "T4", 64000, 262144, 2}}; }

TEST(TimedReplay, PodsQueueUntilDeparturesFreeRoom) {
  std::vector<PodSpec> pods = {Pod("a", 2, 1000, 0, 100), Pod("b", 1, 1000, 10, 50)};
  absl::StatusOr<TimedResult> r = RunTimed(OneNode(), pods, {.policy = "first-fit", .preemption = false});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->completed, 2);
  EXPECT_EQ(r->never_placed, 0);
  // b waits from 10 until a leaves at 100; its JCT is 140 (created 10, done 150).
  EXPECT_DOUBLE_EQ(r->queue_delay_p99_s, 90);
  EXPECT_DOUBLE_EQ(r->jct_mean_s, (100.0 + 140.0) / 2);
  EXPECT_GT(r->mean_gpu_allocation, 0.9);  // the node is full while pods arrive
}

TEST(TimedReplay, LatencySensitivePodsEvictBestEffortOnes) {
  std::vector<PodSpec> pods = {Pod("be", 2, 1000, 0, 1000, "BE"), Pod("ls", 1, 1000, 100, 50, "LS")};
  absl::StatusOr<TimedResult> r = RunTimed(OneNode(), pods, {.policy = "first-fit"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->preemptions, 1);
  EXPECT_NEAR(r->gpu_hours_lost, 2.0 * 100 / 3600, 1e-9);  // be's 100 s on 2 GPUs
  EXPECT_EQ(r->completed, 2);                              // be restarts after ls leaves
}

TEST(TimedReplay, PodsWithoutTimesAreRefused) {
  PodSpec p = Pod("x", 1, 500, 0, 10);
  p.creation_time.reset();
  EXPECT_EQ(RunTimed(OneNode(), std::vector<PodSpec>{p}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::pool::sim
