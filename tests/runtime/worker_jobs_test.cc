// Which session speaks for a job's workers (runtime/service/worker_jobs.h): a job whose session
// ends but which may come back keeps its workers for the reclaim window, the same job (its key)
// takes them back on a new session, nobody else can, and past the window they are handed out to
// be stopped.
#include "runtime/service/worker_jobs.h"

#include <chrono>

#include "gtest/gtest.h"

namespace gpupool::runtime {
namespace {

// Sessions are only compared by address here.
const JobSession* Session(int n) { return reinterpret_cast<const JobSession*>(static_cast<uintptr_t>(0x1000 * n)); }

TEST(WorkerJobs, AJobThatMayComeBackKeepsItsWorkersUntilItsNewSessionAdoptsThem) {
  WorkerJobs workers;
  const auto now = WorkerJobs::Clock::now();
  ASSERT_TRUE(workers.Claim("job-7", "key-7", Session(1)).ok());
  workers.AddNode("job-7", "node-1");
  ASSERT_TRUE(workers.KeepFor("job-7", Session(1), now + std::chrono::seconds(30)));
  // The old session, found dead again, stops nothing: it no longer speaks for them.
  EXPECT_TRUE(workers.Release("job-7", Session(1)).empty());
  EXPECT_TRUE(workers.TakeExpired(now + std::chrono::seconds(29)).empty()) << "stopped within the window";
  // Another job cannot take them, by key or by naming the job.
  EXPECT_EQ(workers.Adopt("key-8", Session(2)), "");
  EXPECT_FALSE(workers.Claim("job-7", "key-8", Session(2)).ok());
  // The job comes back: its new session speaks for them, and its end stops them.
  EXPECT_EQ(workers.Adopt("key-7", Session(3)), "job-7");
  EXPECT_TRUE(workers.TakeExpired(now + std::chrono::hours(1)).empty()) << "an adopted job expired";
  EXPECT_EQ(workers.Release("job-7", Session(3)), std::set<std::string>{"node-1"});
  EXPECT_EQ(workers.size(), 0u);
}

TEST(WorkerJobs, AJobThatDoesNotComeBackHasItsWorkersStoppedAfterTheWindow) {
  WorkerJobs workers;
  const auto now = WorkerJobs::Clock::now();
  ASSERT_TRUE(workers.Claim("job-7", "key-7", Session(1)).ok());
  workers.AddNode("job-7", "node-1");
  workers.AddNode("job-7", "node-2");
  ASSERT_TRUE(workers.KeepFor("job-7", Session(1), now + std::chrono::seconds(30)));
  auto expired = workers.TakeExpired(now + std::chrono::seconds(31));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired["job-7"], (std::set<std::string>{"node-1", "node-2"}));
  EXPECT_EQ(workers.Adopt("key-7", Session(2)), "") << "taken back after it was stopped";
  EXPECT_EQ(workers.size(), 0u);
}

TEST(WorkerJobs, AJobWithoutAKeyOrTakenOverAlreadyIsNotKept) {
  WorkerJobs workers;
  const auto until = WorkerJobs::Clock::now() + std::chrono::seconds(30);
  ASSERT_TRUE(workers.Claim("job-1", "", Session(1)).ok());
  EXPECT_FALSE(workers.KeepFor("job-1", Session(1), until)) << "a job without a key cannot come back";
  ASSERT_TRUE(workers.Claim("job-2", "key-2", Session(2)).ok());
  ASSERT_TRUE(workers.Claim("job-2", "key-2", Session(3)).ok());  // back on a new connection already
  EXPECT_FALSE(workers.KeepFor("job-2", Session(2), until)) << "the old session kept what the new one holds";
  // A job back on a new session while its old one has not been seen to end (a half-open
  // connection): the new one takes its workers over, and the old one's end stops nothing.
  EXPECT_EQ(workers.Adopt("key-2", Session(4)), "job-2");
  EXPECT_TRUE(workers.Release("job-2", Session(3)).empty());
  EXPECT_FALSE(workers.KeepFor("job-2", Session(3), until));
}

}  // namespace
}  // namespace gpupool::runtime
