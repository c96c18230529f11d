// Batches between a driver and its workers as frames (runtime/tasks/worker_protocol.h): a batch
// over a frame's limit is split, nothing is lost or reordered, and a result too big for any frame
// fails its task naming its size instead of never arriving.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tasks/run_outcome.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime::wire {
namespace {

using ::testing::HasSubstr;

TEST(WorkerFrames, ABatchThatFitsIsOneFrame) {
  Tasks tasks{.lease_id = "l1", .lease = "lease-bytes", .tasks = {}};
  for (uint64_t i = 0; i < 3; ++i) tasks.tasks.push_back(TaskToRun{.id = i, .function = "f", .args = "abc"});
  std::vector<std::string> frames = EncodeTaskFrames(tasks, 1 << 20);
  ASSERT_EQ(frames.size(), 1u);
  absl::StatusOr<Tasks> back = DecodeTasks(frames[0]);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->lease, "lease-bytes");
  EXPECT_EQ(back->tasks.size(), 3u);
}

TEST(WorkerFrames, TasksOverTheLimitGoInOrderOverSeveralFramesTheLeaseInTheFirst) {
  Tasks tasks{.lease_id = "l1", .lease = "lease-bytes", .tasks = {}};
  for (uint64_t i = 0; i < 10; ++i) {
    tasks.tasks.push_back(TaskToRun{.id = i, .function = "f", .args = std::string(300, 'a' + i)});
  }
  const size_t limit = 1000;
  std::vector<std::string> frames = EncodeTaskFrames(tasks, limit);
  ASSERT_GT(frames.size(), 3u);
  uint64_t next = 0;
  for (size_t f = 0; f < frames.size(); ++f) {
    EXPECT_LE(frames[f].size(), limit) << "frame " << f;
    absl::StatusOr<Tasks> part = DecodeTasks(frames[f]);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(part->lease_id, "l1");
    EXPECT_EQ(part->lease, f == 0 ? "lease-bytes" : "") << "frame " << f;
    for (const TaskToRun& t : part->tasks) {
      EXPECT_EQ(t.id, next);
      EXPECT_EQ(t.args, std::string(300, 'a' + next));
      ++next;
    }
  }
  EXPECT_EQ(next, 10u);
}

TEST(WorkerFrames, AResultTooBigForAnyFrameFailsItsTaskNamingItsSizeAndTheRestArrive) {
  std::vector<Outcome> outcomes;
  for (uint64_t i = 0; i < 6; ++i) {
    outcomes.push_back(Outcome{.id = i, .kind = static_cast<uint64_t>(RunOutcome::Kind::kDone),
                               .value = std::string(i == 2 ? 5000 : 200, 'v'), .location = "node-1/GPU 0"});
  }
  const size_t limit = 1000;
  std::vector<std::string> frames = EncodeOutcomeFrames(outcomes, limit);
  std::vector<Outcome> got;
  for (const std::string& frame : frames) {
    EXPECT_LE(frame.size(), limit);
    absl::StatusOr<std::vector<Outcome>> part = DecodeOutcomes(frame);
    ASSERT_TRUE(part.ok()) << part.status();
    for (Outcome& o : *part) got.push_back(std::move(o));
  }
  ASSERT_EQ(got.size(), 6u);
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(got[i].id, i);
    if (i == 2) {
      EXPECT_EQ(got[i].kind, static_cast<uint64_t>(RunOutcome::Kind::kFailed));
      EXPECT_EQ(got[i].code, static_cast<int64_t>(ErrorCode::kResourceExhausted));
      EXPECT_THAT(got[i].message, HasSubstr("its result, 5000 bytes, is over the 1000 bytes"));
      EXPECT_EQ(got[i].location, "node-1/GPU 0");
    } else {
      EXPECT_EQ(got[i].kind, static_cast<uint64_t>(RunOutcome::Kind::kDone));
      EXPECT_EQ(got[i].value, std::string(200, 'v'));
    }
  }
}

}  // namespace
}  // namespace gpupool::runtime::wire
