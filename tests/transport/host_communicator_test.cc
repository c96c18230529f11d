#include "transport/host_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/transport/collective_checks.h"
#include "tests/transport/test_peer_process.h"

namespace gpupool::transport {
namespace {

using ::testing::HasSubstr;
using testing::PeerProcess;

std::unique_ptr<UcxWorker> MakeWorker(const std::string& name) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker =
      UcxWorker::Create({.transports = "tcp", .name = name});
  EXPECT_TRUE(worker.ok()) << worker.status();
  return worker.ok() ? *std::move(worker) : nullptr;
}

// This process is rank 0; ranks 1..n-1 are ucx_test_peer processes. Sends every rank the
// address list and creates rank 0's communicator (all ranks join at once).
struct Ranks {
  std::unique_ptr<UcxWorker> worker;
  std::vector<std::unique_ptr<PeerProcess>> others;
  std::unique_ptr<HostCommunicator> comm;

  static Ranks Start(int n, bool await_go) {
    Ranks ranks;
    ranks.worker = MakeWorker("rank 0");
    std::vector<std::string> addresses = {ranks.worker->address()};
    for (int r = 1; r < n; ++r) {
      absl::StatusOr<std::unique_ptr<PeerProcess>> p = PeerProcess::Start(
          {"rank", "--transports=tcp", absl::StrCat("--rank=", r),
           absl::StrCat("--await_go=", await_go ? 1 : 0)});
      EXPECT_TRUE(p.ok()) << p.status();
      if (!p.ok()) return ranks;
      addresses.push_back((*p)->address());
      ranks.others.push_back(*std::move(p));
    }
    std::vector<std::string> hex;
    for (const std::string& a : addresses) hex.push_back(testing::HexEncode(a));
    for (auto& p : ranks.others) p->WriteLine("addresses " + absl::StrJoin(hex, ","));
    absl::StatusOr<std::unique_ptr<HostCommunicator>> comm =
        HostCommunicator::Create(*ranks.worker, 0, addresses, {.timeout = absl::Seconds(20)});
    EXPECT_TRUE(comm.ok()) << comm.status();
    if (comm.ok()) ranks.comm = *std::move(comm);
    for (auto& p : ranks.others) {
      absl::StatusOr<std::string> line = p->ReadLine(absl::Seconds(20));
      EXPECT_TRUE(line.ok() && *line == "joined") << (line.ok() ? *line : line.status().ToString());
    }
    return ranks;
  }
};

TEST(HostCommunicator, ThreeProcessesGetTheRightResultOfEveryCollective) {
  Ranks ranks = Ranks::Start(3, /*await_go=*/false);
  ASSERT_NE(ranks.comm, nullptr);
  EXPECT_EQ(ranks.comm->size(), 3);
  std::vector<std::string> failures = testing::RunCollectiveChecks(*ranks.comm);
  EXPECT_THAT(failures, ::testing::IsEmpty());
  for (auto& p : ranks.others) {
    std::vector<std::string> theirs;
    while (true) {
      absl::StatusOr<std::string> line = p->ReadLine(absl::Seconds(20));
      ASSERT_TRUE(line.ok()) << line.status();
      if (*line == "checks done") break;
      theirs.push_back(*line);
    }
    EXPECT_THAT(theirs, ::testing::IsEmpty()) << "rank " << p->pid();
  }
  ranks.comm.reset();
}

TEST(HostCommunicator, OneRankCollectivesLeaveTheDataAsItIs) {
  std::unique_ptr<UcxWorker> worker = MakeWorker("alone");
  absl::StatusOr<std::unique_ptr<HostCommunicator>> comm =
      HostCommunicator::Create(*worker, 0, {worker->address()});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_THAT(testing::RunCollectiveChecks(**comm), ::testing::IsEmpty());
}

TEST(HostCommunicator, KilledRankFailsTheCollectiveWithUnavailableNamingIt) {
  Ranks ranks = Ranks::Start(3, /*await_go=*/true);
  ASSERT_NE(ranks.comm, nullptr);
  ranks.others[1]->Kill();  // rank 2
  ranks.others[1]->Wait();
  ranks.others[0]->WriteLine("go");  // rank 1 joins the collective
  std::vector<double> data(1 << 16, 1.0);
  absl::Time start = absl::Now();
  absl::Status status = ranks.comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 2"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The communicator is broken as a whole: later calls fail at once with the same cause.
  absl::Span<std::byte> bytes(reinterpret_cast<std::byte*>(data.data()), sizeof(double) * 8);
  EXPECT_EQ(ranks.comm->Broadcast(0, bytes).code(),
            absl::StatusCode::kUnavailable);
  ranks.comm.reset();
}

TEST(HostCommunicator, RankThatNeverJoinsMakesCreateTimeOut) {
  std::unique_ptr<UcxWorker> worker = MakeWorker("rank 0");
  std::unique_ptr<UcxWorker> absent = MakeWorker("absent");  // never creates a communicator
  absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<HostCommunicator>> comm = HostCommunicator::Create(
      *worker, 0, {worker->address(), absent->address()}, {.timeout = absl::Milliseconds(300)});
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("rank 1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(HostCommunicator, BadRankOrAddressListIsInvalidArgument) {
  std::unique_ptr<UcxWorker> worker = MakeWorker("w");
  EXPECT_EQ(HostCommunicator::Create(*worker, 1, {worker->address()}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostCommunicator::Create(*worker, 0, {"not this worker"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<HostCommunicator>> comm =
      HostCommunicator::Create(*worker, 0, {worker->address()});
  ASSERT_TRUE(comm.ok());
  std::byte b{};
  EXPECT_EQ((*comm)->Send(1, 0, {&b, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->Send(0, kReservedTags, {&b, 1}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpupool::transport
