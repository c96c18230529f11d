#include "checkpoint/async_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "checkpoint/directory_backend.h"
#include "tests/checkpoint/fault_injecting_backend.h"
#include "tests/checkpoint/test_dir.h"

namespace gpupool::checkpoint {
namespace {

using ::testing::HasSubstr;
using testing::CapturedWarnings;
using testing::CaptureInto;
using testing::Faults;
using testing::FaultInjectingBackend;
using testing::Pattern;
namespace fs = std::filesystem;

constexpr uint64_t kMiB = 1 << 20;

class AsyncWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir("async");
    auto backend = NewLocalDirectoryBackend({.root = dir_.string()});
    ASSERT_TRUE(backend.ok());
    auto store = SnapshotStore::Open(
        {.backend = std::make_unique<FaultInjectingBackend>(std::move(*backend), &faults_),
         .keep_last = 3,
         .warning_sink = CaptureInto(warnings_)});
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
  }
  void TearDown() override {
    faults_.OpenGate();
    fs::remove_all(dir_);
  }

  fs::path dir_;
  Faults faults_;
  std::shared_ptr<CapturedWarnings> warnings_ = std::make_shared<CapturedWarnings>();
  std::unique_ptr<SnapshotStore> store_;
};

TEST_F(AsyncWriterTest, SubmitCopiesTheStateSoTheTaskMayChangeItAtOnce) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 64 * kMiB});
  std::vector<std::byte> weights = Pattern(3 * kMiB, 1), moments = Pattern(kMiB + 5, 2);
  const std::vector<std::byte> weights_then = weights, moments_then = moments;
  std::span<const std::byte> pieces[] = {weights, moments};
  faults_.CloseGate();  // keep the write from starting until the state has changed
  absl::StatusOr<SnapshotFuture> future = writer.Submit("t", 7, "meta", pieces);
  ASSERT_TRUE(future.ok()) << future.status();
  std::fill(weights.begin(), weights.end(), std::byte{0});
  std::fill(moments.begin(), moments.end(), std::byte{0});
  faults_.OpenGate();
  absl::StatusOr<SnapshotInfo> info = future->get();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 7);

  std::vector<std::byte> w(weights.size()), m(moments.size());
  std::span<std::byte> buffers[] = {w, m};
  absl::StatusOr<LoadResult> loaded = store_->LoadInto("t", buffers);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->info.metadata, "meta");
  EXPECT_EQ(w, weights_then);
  EXPECT_EQ(m, moments_then);
}

TEST_F(AsyncWriterTest, ANewerSubmitReplacesThePendingOneAndTheTaskNeverHasTwoWriters) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 64 * kMiB});
  std::vector<std::byte> state = Pattern(2 * kMiB, 1);
  std::span<const std::byte> pieces[] = {state};
  faults_.CloseGate();
  auto first = writer.Submit("t", 1, "", pieces);
  ASSERT_TRUE(first.ok());
  faults_.WaitUntilBlocked(1);  // step 1 is being written
  auto second = writer.Submit("t", 2, "", pieces);
  ASSERT_TRUE(second.ok());
  const std::vector<std::byte> newer = Pattern(2 * kMiB, 3);
  std::copy(newer.begin(), newer.end(), state.begin());  // in place: `pieces` points at it
  auto third = writer.Submit("t", 3, "", pieces);  // step 2 has not started: replaced
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(second->wait_for(std::chrono::seconds(0)), std::future_status::ready);
  absl::StatusOr<SnapshotInfo> superseded = second->get();
  EXPECT_EQ(superseded.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(superseded.status().message()), HasSubstr("superseded"));
  faults_.OpenGate();

  EXPECT_EQ(first->get()->version, 1u);
  absl::StatusOr<SnapshotInfo> last = third->get();
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->step, 3);
  EXPECT_EQ(last->version, 2u);
  EXPECT_EQ(faults_.MaxWriters("t"), 1);
  EXPECT_EQ(store_->Load("t")->payload, state);
  AsyncWriterStats stats = writer.stats();
  EXPECT_EQ(stats.superseded, 1u);
  EXPECT_EQ(stats.written, 2u);
}

TEST_F(AsyncWriterTest, AFullStagingBudgetRefusesAtOnceByDefaultAndWaitsWhenAskedTo) {
  // 3 MiB rounds to 4 MiB of staging: one snapshot fills the budget.
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 4 * kMiB});
  std::vector<std::byte> state = Pattern(3 * kMiB, 1);
  std::span<const std::byte> pieces[] = {state};
  faults_.CloseGate();
  auto a = writer.Submit("a", 1, "", pieces);
  ASSERT_TRUE(a.ok());
  faults_.WaitUntilBlocked(1);

  auto refused = writer.Submit("b", 1, "", pieces);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("staging budget"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("\"b\""));
  EXPECT_EQ(writer.stats().rejected_no_staging, 1u);

  std::thread release([&] {
    // Open the gate only once the second Submit is known to be waiting for room.
    while (writer.stats().rejected_no_staging < 1) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    faults_.OpenGate();
  });
  auto waited = writer.Submit("b", 2, "", pieces,
                              {.wait_for_staging_until = absl::Now() + absl::Seconds(60)});
  release.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_TRUE(waited->get().ok());
  EXPECT_TRUE(a->get().ok());
  EXPECT_EQ(store_->Load("b")->result.info.step, 2);
  EXPECT_LE(writer.stats().staging_bytes_reserved, 4 * kMiB);
}

TEST_F(AsyncWriterTest, ASnapshotLargerThanTheWholeBudgetIsWrittenSynchronously) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 2 * kMiB});
  std::vector<std::byte> state = Pattern(5 * kMiB, 4);
  std::span<const std::byte> pieces[] = {state};
  auto f = writer.Submit("big", 9, "", pieces);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_TRUE(f->get().ok());
  EXPECT_EQ(writer.stats().written_synchronously, 1u);
  EXPECT_EQ(writer.stats().staging_bytes_reserved, 0u);
  EXPECT_EQ(store_->Load("big")->payload, state);
}

TEST_F(AsyncWriterTest, WriteErrorsArriveInTheFutureTheCallbackAndFlush) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 16 * kMiB});
  std::vector<std::byte> state = Pattern(kMiB, 1);
  std::span<const std::byte> pieces[] = {state};
  ASSERT_TRUE(writer.Submit("t", 1, "", pieces).ok());
  ASSERT_TRUE(writer.Flush("t").ok());

  faults_.enospc_after_bytes = faults_.appended + 1000;
  absl::Status from_callback;
  auto f = writer.Submit("t", 2, "", pieces,
                         {.on_done = [&](const absl::StatusOr<SnapshotInfo>& r) {
                           from_callback = r.status();
                         }});
  ASSERT_TRUE(f.ok());
  absl::StatusOr<SnapshotInfo> r = f->get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(dir_.string()));
  absl::StatusOr<SnapshotInfo> flushed = writer.Flush("t");
  EXPECT_EQ(flushed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(from_callback.code(), absl::StatusCode::kResourceExhausted);
  absl::Status all = writer.FlushAll();
  EXPECT_THAT(std::string(all.message()), HasSubstr("task \"t\""));
  // The committed step 1 is untouched.
  faults_.enospc_after_bytes = -1;
  EXPECT_EQ(store_->Load("t")->result.info.step, 1);
  EXPECT_EQ(writer.Flush("never").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AsyncWriterTest, ShutdownWritesEverythingStaged) {
  std::vector<std::byte> state = Pattern(kMiB, 1);
  std::span<const std::byte> pieces[] = {state};
  {
    AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 64 * kMiB});
    for (int task = 0; task < 6; ++task) {
      ASSERT_TRUE(writer.Submit("t" + std::to_string(task), task, "", pieces).ok());
    }
    EXPECT_TRUE(writer.Shutdown().ok());
    EXPECT_EQ(writer.Submit("t0", 1, "", pieces).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(writer.Shutdown().ok());  // idempotent
  }
  for (int task = 0; task < 6; ++task) {
    EXPECT_EQ(store_->Load("t" + std::to_string(task))->result.info.step, task);
  }
}

TEST_F(AsyncWriterTest, ShutdownPastItsDeadlineCancelsWhatHasNotStartedAndSaysWhich) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 64 * kMiB});
  std::vector<std::byte> state = Pattern(kMiB, 1);
  std::span<const std::byte> pieces[] = {state};
  faults_.CloseGate();
  auto a = writer.Submit("a", 1, "", pieces);
  faults_.WaitUntilBlocked(1);
  auto b = writer.Submit("b", 5, "", pieces);
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread release([&] {
    while (writer.stats().cancelled_at_shutdown < 1) std::this_thread::yield();
    faults_.OpenGate();
  });
  absl::Status s = writer.Shutdown(absl::Now());
  release.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(s.message()), HasSubstr("task \"b\" step 5"));
  EXPECT_TRUE(a->get().ok());  // under way: always finished
  EXPECT_EQ(b->get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(store_->Load("b").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AsyncWriterTest, ManyTasksFromManyThreadsEachEndAtTheirLastStepWithOneWriterEach) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 64 * kMiB, .writer_threads = 2});
  constexpr int kTasks = 4, kSteps = 12;
  std::vector<std::thread> threads;
  for (int t = 0; t < kTasks; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> state(kMiB / 2);
      for (int step = 1; step <= kSteps; ++step) {
        state = Pattern(state.size(), t * 1000 + step);
        std::span<const std::byte> pieces[] = {state};
        // A full budget is legitimate here; wait for room so every task ends at its last step.
        auto f = writer.Submit("task" + std::to_string(t), step, "", pieces,
                               {.wait_for_staging_until = absl::Now() + absl::Seconds(60)});
        EXPECT_TRUE(f.ok()) << f.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(writer.FlushAll().ok());
  for (int t = 0; t < kTasks; ++t) {
    const std::string task = "task" + std::to_string(t);
    auto loaded = store_->Load(task);
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(loaded->result.info.step, kSteps);
    EXPECT_EQ(loaded->payload, Pattern(kMiB / 2, t * 1000 + kSteps));
    EXPECT_EQ(faults_.MaxWriters(task), 1) << task;
  }
  AsyncWriterStats stats = writer.stats();
  EXPECT_EQ(stats.written + stats.superseded, static_cast<uint64_t>(kTasks * kSteps));
}

TEST_F(AsyncWriterTest, StagingBuffersAreReusedNotReallocated) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 64 * kMiB});
  ASSERT_TRUE(writer.Prewarm(3 * kMiB).ok());
  EXPECT_EQ(writer.stats().staging_bytes_reserved, 4 * kMiB);
  std::vector<std::byte> state = Pattern(3 * kMiB, 1);
  std::span<const std::byte> pieces[] = {state};
  for (int step = 0; step < 5; ++step) {
    auto f = writer.Submit("t", step, "", pieces);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->get().ok());
  }
  EXPECT_EQ(writer.stats().staging_bytes_reserved, 4 * kMiB);
  EXPECT_EQ(writer.Prewarm(100 * kMiB).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(AsyncWriterTest, BadInputIsRefusedBeforeAnythingIsStaged) {
  AsyncSnapshotWriter writer(store_.get(), {.staging_budget_bytes = 4 * kMiB});
  EXPECT_EQ(writer.Submit("../x", 1, "", {}).status().code(), absl::StatusCode::kInvalidArgument);
  std::string huge(kMaxMetadataBytes + 1, 'm');
  EXPECT_EQ(writer.Submit("t", 1, huge, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.stats().staged, 0u);
}

}  // namespace
}  // namespace gpupool::checkpoint
