#include "transport/ucx_worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "tests/transport/test_peer_process.h"

namespace gpupool::transport {
namespace {

using ::testing::HasSubstr;

// Shared memory needs peer-failure detection off (UcxOptions::detect_peer_failure).
std::unique_ptr<UcxWorker> MakeWorker(const std::string& transports, const std::string& name) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(
      {.transports = transports, .detect_peer_failure = transports != "shm", .name = name});
  EXPECT_TRUE(worker.ok()) << worker.status();
  return worker.ok() ? *std::move(worker) : nullptr;
}

TEST(UcxWorker, StartsWithEachTransportChoiceAndHasAnAddress) {
  for (const char* transports : {"default", "tcp", "shm"}) {
    std::unique_ptr<UcxWorker> worker = MakeWorker(transports, transports);
    ASSERT_NE(worker, nullptr) << transports;
    EXPECT_FALSE(worker->address().empty()) << transports;
    EXPECT_GT(worker->max_am_header(), 64u) << transports;
  }
}

TEST(UcxWorker, EmptyAddressIsInvalidArgument) {
  std::unique_ptr<UcxWorker> worker = MakeWorker("tcp", "w");
  absl::StatusOr<PeerId> peer = worker->Connect("", "nobody");
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(peer.status().message(), HasSubstr("nobody"));
}

TEST(UcxWorker, ConnectingTwiceToOneAddressGivesOnePeer) {
  std::unique_ptr<UcxWorker> a = MakeWorker("tcp", "a");
  std::unique_ptr<UcxWorker> b = MakeWorker("tcp", "b");
  absl::StatusOr<PeerId> first = a->Connect(b->address(), "b");
  absl::StatusOr<PeerId> second = a->Connect(b->address(), "b again");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
}

// An eager message with a reply endpoint, answered with a rendezvous-sized payload that the
// first worker receives into its own buffer.
class UcxWorkerTransports : public ::testing::TestWithParam<std::string> {};

TEST_P(UcxWorkerTransports, ActiveMessageAndRendezvousReply) {
  std::unique_ptr<UcxWorker> asker = MakeWorker(GetParam(), "asker");
  std::unique_ptr<UcxWorker> answerer = MakeWorker(GetParam(), "answerer");
  const std::vector<std::byte> answer = testing::Pattern(4 << 20);
  answerer->SetAmHandler(AmId::kCollective, [&](AmMessage& message) {
    EXPECT_EQ(message.header(), "question");
    answerer->Reply(message, AmId::kCollective, "answer", answer.data(), answer.size(),
                    [](absl::Status sent) { EXPECT_TRUE(sent.ok()) << sent; });
  });
  std::vector<std::byte> received(answer.size());
  absl::Notification done;
  absl::Status receive_status;
  bool was_rendezvous = false;
  asker->SetAmHandler(AmId::kCollective, [&](AmMessage& message) {
    EXPECT_EQ(message.header(), "answer");
    EXPECT_EQ(message.data_size(), answer.size());
    was_rendezvous = message.is_rendezvous();
    if (!message.is_rendezvous()) {
      std::copy(message.eager_data().begin(), message.eager_data().end(), received.begin());
      done.Notify();
      return;
    }
    asker->ReceiveAmData(message, received.data(), [&](absl::Status status) {
      receive_status = status;
      done.Notify();
    });
  });
  absl::StatusOr<PeerId> peer = asker->Connect(answerer->address(), "answerer");
  ASSERT_TRUE(peer.ok()) << peer.status();
  asker->Post([&] {
    asker->SendAm(*peer, AmId::kCollective, "question", nullptr, 0, /*reply=*/true,
                  [](absl::Status sent) { EXPECT_TRUE(sent.ok()) << sent; });
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(receive_status.ok()) << receive_status;
  EXPECT_TRUE(was_rendezvous) << "4 MiB should exceed UCX's rendezvous threshold";
  if (GetParam() == "shm") {
    asker->RunInLoop([&] { EXPECT_THAT(asker->DescribePeer(*peer), HasSubstr("cma")); });
  }
  EXPECT_EQ(testing::Checksum(received), testing::Checksum(answer));
  asker->ClearAmHandler(AmId::kCollective);
  answerer->ClearAmHandler(AmId::kCollective);
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxWorkerTransports,
                         ::testing::Values("tcp", "shm", "default"));

TEST(UcxWorker, KilledPeerFailsSendsWithUnavailableNamingItAndTellsListeners) {
  absl::StatusOr<std::unique_ptr<testing::PeerProcess>> peer =
      testing::PeerProcess::Start({"owner", "--transports=tcp", "--sizes=1"});
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::unique_ptr<UcxWorker> worker = MakeWorker("tcp", "survivor");
  absl::StatusOr<PeerId> id = worker->Connect((*peer)->address(), "doomed-peer");
  ASSERT_TRUE(id.ok());
  absl::Notification told;
  absl::Status told_status;
  worker->RunInLoop([&] {
    worker->AddPeerFailureListener([&](PeerId failed, const absl::Status& status) {
      if (failed != *id || told.HasBeenNotified()) return;
      told_status = status;
      told.Notify();
    });
  });
  // Wire the endpoint up first, so the failure is a reset of a live connection.
  absl::Notification sent_once;
  worker->Post([&] {
    worker->SendAm(*id, AmId::kCollective, "hello", nullptr, 0, false,
                   [&](absl::Status) { sent_once.Notify(); });
  });
  ASSERT_TRUE(sent_once.WaitForNotificationWithTimeout(absl::Seconds(5)));
  (*peer)->Kill();
  (*peer)->Wait();
  absl::Time start = absl::Now();
  absl::Status last;
  // Keep sending until the failure is seen: every send completes, none hangs.
  while (absl::Now() - start < absl::Seconds(10) && last.ok()) {
    absl::Notification sent;
    worker->Post([&] {
      worker->SendAm(*id, AmId::kCollective, "anyone?", nullptr, 0, false,
                     [&](absl::Status s) {
                       last = s;
                       sent.Notify();
                     });
    });
    ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(10)));
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
  EXPECT_THAT(last.message(), HasSubstr("doomed-peer"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(told.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(told_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(told_status.message(), HasSubstr("doomed-peer"));
}

TEST(UcxWorker, FailPeerCancelsAndLaterSendsFailAtOnce) {
  std::unique_ptr<UcxWorker> a = MakeWorker("tcp", "a");
  std::unique_ptr<UcxWorker> b = MakeWorker("tcp", "b");
  absl::StatusOr<PeerId> peer = a->Connect(b->address(), "b");
  ASSERT_TRUE(peer.ok());
  a->FailPeer(*peer, absl::DeadlineExceededError("too slow"));
  absl::Notification sent;
  absl::Status status;
  a->Post([&] {
    a->SendAm(*peer, AmId::kCollective, "late", nullptr, 0, false, [&](absl::Status s) {
      status = s;
      sent.Notify();
    });
  });
  ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("too slow"));
  // A failed peer is replaced by a fresh endpoint on the next Connect.
  absl::StatusOr<PeerId> again = a->Connect(b->address(), "b");
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, *peer);
}

TEST(UcxWorker, TimersRunInDeadlineOrderAndCancelledOnesDoNot) {
  std::unique_ptr<UcxWorker> worker = MakeWorker("tcp", "w");
  std::vector<int> order;
  absl::Notification last;
  worker->RunInLoop([&] {
    absl::Time now = absl::Now();
    worker->AddTimer(now + absl::Milliseconds(60), [&] {
      order.push_back(3);
      last.Notify();
    });
    worker->AddTimer(now + absl::Milliseconds(20), [&] { order.push_back(1); });
    uint64_t cancelled = worker->AddTimer(now + absl::Milliseconds(30), [&] { order.push_back(9); });
    worker->AddTimer(now + absl::Milliseconds(40), [&] { order.push_back(2); });
    worker->CancelTimer(cancelled);
  });
  ASSERT_TRUE(last.WaitForNotificationWithTimeout(absl::Seconds(5)));
  worker->RunInLoop([&] { EXPECT_EQ(order, (std::vector<int>{1, 2, 3})); });
}

}  // namespace
}  // namespace gpupool::transport
