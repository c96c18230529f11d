// Checkpoints through the task API, end to end on the embedded pool: forced periodic snapshots,
// a guaranteed team reclaiming its GPU from a borrower whose task snapshots at its safe point and
// resumes on the next lease with exactly the result of an uninterrupted run, a grace period
// missed (the task resumes from its previous snapshot and the lost work is counted), a task that is
// not checkpointable (it restarts), and callback-style state.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpupool/gpupool.h"
#include "gtest/gtest.h"
#include "tests/runtime/event_log.h"
#include "tests/runtime/training_state.h"

namespace {

using ::testing::HasSubstr;

struct TrainResult {
  uint64_t checksum = 0;
  int64_t resumed_from = -1;  // -1: never resumed
  int attempt = 0;
};

using gpupool::testing::Checksum;
using gpupool::testing::Update;
uint64_t Uninterrupted(int steps) {
  std::vector<uint64_t> state(4096, 1);
  for (int64_t s = 0; s < steps; ++s) Update(state, s);
  return Checksum(state);
}

std::atomic<int64_t> progress{0};
std::atomic<int> step_sleep_us{2000};
std::atomic<int> first_run_stall_ms{0};  // > 0: the first run stops reaching safe points at step 150

TrainResult Train(gpupool::TaskContext& ctx, int steps) {
  std::vector<uint64_t> state(4096, 1);
  int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(state)});
  TrainResult r;
  r.resumed_from = ctx.resumed() ? first : -1;
  r.attempt = ctx.attempt();
  for (int64_t s = first; s < steps; ++s) {
    Update(state, s);
    progress.store(s + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(step_sleep_us.load()));
    if (ctx.attempt() == 0 && s == 150 && first_run_stall_ms.load() > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(first_run_stall_ms.load()));  // misses the grace period
    }
    ctx.Step();
  }
  r.checksum = Checksum(state);
  return r;
}

// Not checkpointable: whatever it did is lost when it is stopped.
TrainResult Unsaved(gpupool::TaskContext& ctx, int steps) {
  std::vector<uint64_t> state(4096, 1);
  for (int64_t s = 0; s < steps; ++s) {
    Update(state, s);
    progress.store(s + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(step_sleep_us.load()));
    ctx.Step();
  }
  return TrainResult{Checksum(state), -1, ctx.attempt()};
}

int Hold(gpupool::TaskContext& ctx, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  ctx.Step();
  return ms;
}

// State kept as a string through save/load callbacks.
std::string Words(gpupool::TaskContext& ctx, int steps) {
  std::string text;
  int64_t first = ctx.Checkpointable([&] { return text; }, [&](std::string_view saved) { text = saved; });
  for (int64_t s = first; s < steps; ++s) {
    text += std::to_string(s) + ",";
    progress.store(s + 1);
    std::this_thread::sleep_for(std::chrono::microseconds(step_sleep_us.load()));
    ctx.Step();
  }
  return text + (ctx.resumed() ? " resumed" : "");
}

std::atomic<bool> release_stalled{false};
int Stalled(gpupool::TaskContext& ctx) {
  int x = 0;
  ctx.Checkpointable({gpupool::StateRegion::Of(x)});
  while (!release_stalled.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // no safe point
  ctx.Step();
  return 7;
}

int TwiceCheckpointable(gpupool::TaskContext& ctx) {
  int x = 0;
  ctx.Checkpointable({gpupool::StateRegion::Of(x)});
  ctx.Checkpointable({gpupool::StateRegion::Of(x)});
  return x;
}

GPUPOOL_REMOTE(Train);
GPUPOOL_REMOTE(Unsaved);
GPUPOOL_REMOTE(Hold);
GPUPOOL_REMOTE(Words);
GPUPOOL_REMOTE(TwiceCheckpointable);
GPUPOOL_REMOTE(Stalled);

// `gpus` GPUs: `owner` is guaranteed all of them, `borrower` may borrow them while they are idle.
// `quick` checkpoints every 20 pool seconds.
std::string ConfigFor(int gpus) {
  return absl::StrCat(R"(
model_groups:
  gpus: [H100-80GB]
priority_classes:
  - {name: training, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 600}
  - {name: quick, value: 500, preemptible: true, grace_period_s: 120, checkpoint_interval_s: 20}
teams:
  - name: owner
    quotas: [{gpus: gpus, nominal: )", gpus, R"(}]
  - name: borrower
    quotas: [{gpus: gpus, nominal: 0, borrowing_limit: )", gpus, R"(}]
)");
}

using gpupool::testing::EventLog;

class Checkpointing : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-ckpt-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    progress = 0;
    step_sleep_us = 2000;
    first_run_stall_ms = 0;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  gpupool::Runtime Start(double clock_speed, bool shared_dir = false, int gpus = 1) {
    gpupool::RuntimeOptions o;
    o.checkpoint_dir_shared = shared_dir;
    o.simulate = absl::StrCat(gpus, "xH100-80GB");
    o.config_text = ConfigFor(gpus);
    o.clock_speed = clock_speed;
    o.lease_linger_ms = 20;
    o.checkpoint_dir = dir_.string();
    o.on_event = [this](const gpupool::RuntimeEvent& e) { log_.Add(e); };
    return gpupool::Init(o);
  }
  static void WaitForProgress(int64_t step) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (progress.load() < step && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_GE(progress.load(), step);
  }
  static gpupool::TeamUsage Usage(const gpupool::Runtime& rt, const std::string& team) {
    for (const gpupool::TeamUsage& u : rt.Stats().teams) {
      if (u.team == team) return u;
    }
    return {};
  }
  // A folder vanishing while it is walked (the store removing it) counts as "still has some": the
  // callers poll until it settles.
  bool DirectoryHasSnapshots() const {
    std::error_code ec;
    if (!std::filesystem::exists(dir_, ec)) return false;
    std::filesystem::recursive_directory_iterator it(dir_, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) return true;
    }
    return static_cast<bool>(ec);
  }

  std::filesystem::path dir_;
  EventLog log_;
};

TEST_F(Checkpointing, PeriodicSnapshotsAreTakenAndRemovedWhenTheTaskFinishes) {
  gpupool::Runtime rt = Start(/*clock_speed=*/1000);  // 2 ms a step = 2 pool s; a snapshot every 10 steps
  auto ref = gpupool::Task(Train).Gpus(1).Team("owner").PriorityClass("quick").Submit(300);
  TrainResult r = *gpupool::Get(ref, std::chrono::seconds(60));
  EXPECT_EQ(r.checksum, Uninterrupted(300));
  EXPECT_EQ(r.resumed_from, -1);
  // The counts and the deletion are bookkept beside the result (a snapshot's commit is counted on
  // the writer's thread): give them a moment on a loaded machine.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       (Usage(rt, "owner").snapshots < 5u || DirectoryHasSnapshots()) && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(Usage(rt, "owner").snapshots, 5u);
  EXPECT_FALSE(DirectoryHasSnapshots()) << "a finished task's snapshots are deleted";
}

TEST_F(Checkpointing, ReclaimedBorrowerSnapshotsAtItsSafePointAndResumesWithTheSameResult) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100);  // grace 120 pool s = 1.2 s; steps take 2 ms
  auto training = gpupool::Task(Train).Gpus(1).Team("borrower").Submit(1500);
  WaitForProgress(200);
  // The owner wants its GPU: the borrower's lease is revoked, its task snapshots and stops.
  auto owner = gpupool::Task(Hold).Gpus(1).Team("owner").Submit(50);
  EXPECT_EQ(*gpupool::Get(owner, std::chrono::seconds(30)), 50);
  TrainResult r = *gpupool::Get(training, std::chrono::seconds(60));
  EXPECT_EQ(r.checksum, Uninterrupted(1500)) << "resumed training must end with the same state";
  EXPECT_GE(r.resumed_from, 200) << "it resumed from the snapshot taken at the revocation";
  EXPECT_EQ(r.attempt, 1);
  gpupool::TeamUsage b = Usage(rt, "borrower");
  EXPECT_EQ(b.preemptions, 1u);
  EXPECT_GE(b.snapshots, 1u);
  EXPECT_LT(b.lost_gpu_hours * 3600, 2.0) << "a snapshot at the safe point loses (almost) nothing";
  EXPECT_THAT(log_.Detail("task-preempted"), HasSubstr("resumes there"));
}

// Reclaim takes the lease that loses least: a borrower task that snapshots every 20 pool seconds
// loses less than one that never does, though it has run longer. The runtime tells the pool of
// each committed snapshot (PoolClient::Checkpointed); without that the pool counts the older
// lease's whole run as at risk and takes the younger, unsaved one.
TEST_F(Checkpointing, ReclaimTakesTheLeaseThatLosesLeastSinceItsLastSnapshot) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100, /*shared_dir=*/false, /*gpus=*/2);
  auto saved = gpupool::Task(Train).Gpus(1).Team("borrower").PriorityClass("quick").Submit(2000);
  WaitForProgress(300);  // 60 pool s in: three periodic snapshots
  auto unsaved = gpupool::Task(Unsaved).Gpus(1).Team("borrower").Submit(1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the unsaved one: 80 pool s at risk
  auto owner = gpupool::Task(Hold).Gpus(1).Team("owner").Submit(50);
  EXPECT_EQ(*gpupool::Get(owner, std::chrono::seconds(30)), 50);
  EXPECT_THAT(log_.Detail("task-preempted"), HasSubstr("Train'"));
  TrainResult s = *gpupool::Get(saved, std::chrono::seconds(60));
  TrainResult u = *gpupool::Get(unsaved, std::chrono::seconds(60));
  EXPECT_EQ(s.checksum, Uninterrupted(2000));
  EXPECT_EQ(s.attempt, 1) << "the task with the recent snapshot was the one preempted";
  EXPECT_EQ(u.attempt, 0) << "the task that would have lost 80 pool s of work kept its GPU";
  EXPECT_EQ(Usage(rt, "borrower").preemptions, 1u);
}

TEST_F(Checkpointing, MissedGracePeriodResumesFromThePreviousSnapshotAndCountsTheLoss) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100);
  first_run_stall_ms = 3000;  // 300 pool s without a safe point: past the 120 s grace period
  auto training = gpupool::Task(Train).Gpus(1).Team("borrower").PriorityClass("quick").Submit(400);
  WaitForProgress(151);  // a periodic snapshot every 20 pool s (~100 steps); stalled now
  auto owner = gpupool::Task(Hold).Gpus(1).Team("owner").Submit(50);
  EXPECT_EQ(*gpupool::Get(owner, std::chrono::seconds(30)), 50);
  TrainResult r = *gpupool::Get(training, std::chrono::seconds(60));
  EXPECT_EQ(r.checksum, Uninterrupted(400));
  EXPECT_GE(r.resumed_from, 1);
  EXPECT_LE(r.resumed_from, 151) << "the revocation's snapshot was never taken";
  gpupool::TeamUsage b = Usage(rt, "borrower");
  EXPECT_EQ(b.preemptions, 1u);
  EXPECT_GT(b.lost_gpu_hours * 3600, 120.0) << "the stalled run's work since its snapshot is lost";
  EXPECT_THAT(log_.Detail("task-preempted"), HasSubstr("lease lost"));
}

TEST_F(Checkpointing, TaskThatIsNotCheckpointableRestartsAndItsWholeRunIsLost) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100);
  auto job = gpupool::Task(Unsaved).Gpus(1).Team("borrower").Submit(600);
  WaitForProgress(200);
  auto owner = gpupool::Task(Hold).Gpus(1).Team("owner").Submit(20);
  EXPECT_EQ(*gpupool::Get(owner, std::chrono::seconds(30)), 20);
  TrainResult r = *gpupool::Get(job, std::chrono::seconds(60));
  EXPECT_EQ(r.checksum, Uninterrupted(600));
  EXPECT_EQ(r.attempt, 1);
  gpupool::TeamUsage b = Usage(rt, "borrower");
  EXPECT_EQ(b.preemptions, 1u);
  EXPECT_GT(b.lost_gpu_hours * 3600, 30.0) << "200+ steps of 0.2 pool s were thrown away";
  EXPECT_THAT(log_.Detail("task-preempted"), HasSubstr("restarts"));
}

TEST_F(Checkpointing, CallbackStateResumes) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100);
  auto job = gpupool::Task(Words).Gpus(1).Team("borrower").Submit(800);
  WaitForProgress(100);
  EXPECT_EQ(*gpupool::Get(gpupool::Task(Hold).Gpus(1).Team("owner").Submit(20), std::chrono::seconds(30)), 20);
  std::string expected;
  for (int s = 0; s < 800; ++s) expected += std::to_string(s) + ",";
  EXPECT_EQ(*gpupool::Get(job, std::chrono::seconds(60)), expected + " resumed");
}

TEST_F(Checkpointing, TaskWithoutSafePointsForTwiceTheIntervalIsReportedOverdue) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100);  // "quick": 20 pool s interval = 0.2 s real
  release_stalled = false;
  auto ref = gpupool::Task(Stalled).Gpus(1).Team("owner").PriorityClass("quick").Submit();
  std::vector<gpupool::OverdueTask> overdue;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (overdue.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    overdue = rt.Stats().overdue;
  }
  release_stalled = true;
  ASSERT_EQ(overdue.size(), 1u);
  EXPECT_EQ(overdue[0].task, "Stalled");
  EXPECT_EQ(overdue[0].team, "owner");
  EXPECT_GT(overdue[0].since_safe_point_s, 40.0);
  EXPECT_EQ(overdue[0].interval_s, 20.0);
  EXPECT_EQ(*gpupool::Get(ref, std::chrono::seconds(30)), 7);
  EXPECT_TRUE(rt.Stats().overdue.empty()) << "a finished task is no longer overdue";
}

TEST_F(Checkpointing, SharedDirectoryBackendResumesTheSame) {
  gpupool::Runtime rt = Start(/*clock_speed=*/100, /*shared_dir=*/true);
  auto training = gpupool::Task(Train).Gpus(1).Team("borrower").Submit(800);
  WaitForProgress(150);
  EXPECT_EQ(*gpupool::Get(gpupool::Task(Hold).Gpus(1).Team("owner").Submit(20), std::chrono::seconds(30)), 20);
  TrainResult r = *gpupool::Get(training, std::chrono::seconds(60));
  EXPECT_EQ(r.checksum, Uninterrupted(800));
  EXPECT_GE(r.resumed_from, 150);
}

TEST_F(Checkpointing, RegisteringTwiceIsAnError) {
  gpupool::Runtime rt = Start(/*clock_speed=*/1);
  try {
    gpupool::Get(gpupool::Submit(TwiceCheckpointable));
    FAIL();
  } catch (const gpupool::TaskError& e) {
    EXPECT_EQ(e.code(), gpupool::ErrorCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("Checkpointable twice"));
  }
}

}  // namespace
