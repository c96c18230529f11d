// The handshake between a worker and its driver (runtime/tasks/job_proof.h): each proves the job's
// worker key without sending it. Against real loopback sockets, a test playing the other side:
// a driver (a real WorkerPool) refuses a connection that cannot prove the key, and proves itself
// first without giving anything away; a worker (JoinAsWorker) refuses a "driver" that cannot
// prove the key, having sent it nothing it could replay. The proof itself is pinned byte for
// byte, since workers and drivers of one build must agree on it.
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/bootstrap/worker_join.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/tasks/job_proof.h"
#include "runtime/tasks/worker_pool.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(JobProof, IsAnHmacOfTheRoleTheJobAndBothNoncesUnderTheKey) {
  // HMAC-SHA256 under "k3y" of each field as its 8-byte little-endian length, then its bytes
  // (computed independently with Python's hmac module).
  EXPECT_EQ(absl::BytesToHexString(JobProof("k3y", ProofRole::kDriver, "job-1", "worker-nonce", "driver-nonce")),
            "5223723ebc48a19b932b479bfbf611989216fe749dd7b6e8217279b28765e46a");
  EXPECT_EQ(absl::BytesToHexString(JobProof("k3y", ProofRole::kWorker, "job-1", "worker-nonce", "driver-nonce")),
            "65cdfd6d554e97c78ab3ebf406ccb80e375fcc62aa894619963d861b2f6ad9ba");
  const std::string proof = JobProof("k3y", ProofRole::kWorker, "job-1", "w", "d");
  EXPECT_TRUE(ProofHolds(proof, "k3y", ProofRole::kWorker, "job-1", "w", "d"));
  // Another key, role, job or nonce: not the same proof.
  EXPECT_FALSE(ProofHolds(proof, "k3z", ProofRole::kWorker, "job-1", "w", "d"));
  EXPECT_FALSE(ProofHolds(proof, "k3y", ProofRole::kDriver, "job-1", "w", "d"));
  EXPECT_FALSE(ProofHolds(proof, "k3y", ProofRole::kWorker, "job-2", "w", "d"));
  EXPECT_FALSE(ProofHolds(proof, "k3y", ProofRole::kWorker, "job-1", "w", "e"));
  EXPECT_FALSE(ProofHolds("", "k3y", ProofRole::kWorker, "job-1", "w", "d"));
  absl::StatusOr<std::string> a = FreshNonce(), b = FreshNonce();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_NE(*a, *b);
}

// A connection to the driver's worker port that says Hello for `job` and returns the answer.
struct Caller {
  std::unique_ptr<FrameSocket> socket;
  std::string nonce = "caller-nonce";
  absl::StatusOr<std::string> Hello(uint16_t port, const std::string& job) {
    absl::StatusOr<std::unique_ptr<FrameSocket>> s = FrameSocket::Connect("127.0.0.1", port, std::chrono::seconds(5));
    if (!s.ok()) return s.status();
    socket = *std::move(s);
    if (absl::Status st = socket->Send(wire::Encode(wire::Hello{.nonce = nonce, .job = job, .node = "n0", .pid = 1}));
        !st.ok()) {
      return st;
    }
    return socket->Receive(std::chrono::seconds(5));
  }
  std::string Refusal() {
    absl::StatusOr<std::string> frame = socket->Receive(std::chrono::seconds(5));
    if (!frame.ok()) return std::string(frame.status().message());
    absl::StatusOr<wire::Welcome> welcome = wire::DecodeWelcome(*frame);
    return welcome.ok() ? welcome->refusal : std::string(welcome.status().message());
  }
};

TEST(WorkerHandshake, TheDriverProvesTheKeyFirstAndRefusesAConnectionThatCannot) {
  WorkerPoolOptions options;
  options.job_id = "job-1";
  options.launch.secret = "the-job-key";
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool = WorkerPool::Start(std::move(options));
  ASSERT_TRUE(pool.ok()) << pool.status();
  const uint16_t port = (*pool)->port();

  // Without the key: the driver's challenge proves it holds the key, and says nothing of it.
  Caller guesser;
  absl::StatusOr<std::string> frame = guesser.Hello(port, "job-1");
  ASSERT_TRUE(frame.ok()) << frame.status();
  absl::StatusOr<wire::Challenge> challenge = wire::DecodeChallenge(*frame);
  ASSERT_TRUE(challenge.ok()) << challenge.status();
  EXPECT_TRUE(ProofHolds(challenge->proof, "the-job-key", ProofRole::kDriver, "job-1", guesser.nonce, challenge->nonce));
  EXPECT_THAT(*frame, Not(HasSubstr("the-job-key")));
  ASSERT_TRUE(guesser.socket->Send(wire::Encode(wire::Proof{.proof = std::string(32, 'x')})).ok());
  EXPECT_THAT(guesser.Refusal(), HasSubstr("did not prove it holds the job's worker key"));

  // The driver's own proof sent back as the worker's: roles differ, so it is refused too.
  Caller replayer;
  frame = replayer.Hello(port, "job-1");
  ASSERT_TRUE(frame.ok()) << frame.status();
  challenge = wire::DecodeChallenge(*frame);
  ASSERT_TRUE(challenge.ok());
  ASSERT_TRUE(replayer.socket->Send(wire::Encode(wire::Proof{.proof = challenge->proof})).ok());
  EXPECT_THAT(replayer.Refusal(), HasSubstr("did not prove"));

  // With the key: past the proof (refused only because this driver started no worker on n0).
  Caller worker;
  frame = worker.Hello(port, "job-1");
  ASSERT_TRUE(frame.ok()) << frame.status();
  challenge = wire::DecodeChallenge(*frame);
  ASSERT_TRUE(challenge.ok());
  ASSERT_TRUE(worker.socket
                  ->Send(wire::Encode(wire::Proof{
                      .proof = JobProof("the-job-key", ProofRole::kWorker, "job-1", worker.nonce, challenge->nonce)}))
                  .ok());
  EXPECT_THAT(worker.Refusal(), HasSubstr("did not ask for a worker on node n0"));

  // Another job's worker is told at once, before any challenge.
  Caller stranger;
  frame = stranger.Hello(port, "job-2");
  ASSERT_TRUE(frame.ok()) << frame.status();
  absl::StatusOr<wire::Welcome> refused = wire::DecodeWelcome(*frame);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_THAT(refused->refusal, HasSubstr("not that job's driver"));
}

TEST(WorkerHandshake, AWorkerRefusesADriverThatCannotProveTheKeyAndNeverSendsIt) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener = FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  int key_pipe[2];
  ASSERT_EQ(::pipe(key_pipe), 0);
  const std::string key = "the-job-key";
  ASSERT_EQ(::write(key_pipe[1], key.data(), key.size()), static_cast<ssize_t>(key.size()));
  ::close(key_pipe[1]);
  absl::Status joined;
  std::thread worker([&] {
    absl::StatusOr<WorkerJoin> join = JoinAsWorker(
        {"program", "--gpupool-worker", absl::StrCat("--gpupool-worker-driver=127.0.0.1:", (*listener)->port()),
         "--gpupool-worker-job=job-1", "--gpupool-worker-node=n0",
         absl::StrCat("--gpupool-worker-secret-fd=", key_pipe[0])});
    joined = join.status();
  });
  // An impostor listening where the worker was told its driver is.
  absl::StatusOr<std::unique_ptr<FrameSocket>> conn = (*listener)->Accept();
  ASSERT_TRUE(conn.ok()) << conn.status();
  absl::StatusOr<std::string> hello = (*conn)->Receive(std::chrono::seconds(10));
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_THAT(*hello, Not(HasSubstr(key))) << "the worker sent the job's key";
  ASSERT_TRUE((*conn)->Send(wire::Encode(wire::Challenge{.nonce = "impostor", .proof = std::string(32, 'y')})).ok());
  worker.join();
  ::close(key_pipe[0]);
  EXPECT_EQ(joined.code(), absl::StatusCode::kPermissionDenied) << joined;
  EXPECT_THAT(joined.message(), HasSubstr("did not prove it holds the worker key of job job-1"));
  // And it said nothing more: its connection ends without a proof of its own.
  absl::StatusOr<std::string> after = (*conn)->Receive(std::chrono::seconds(5));
  EXPECT_FALSE(after.ok()) << "the worker answered an impostor's challenge";
}

TEST(WorkerHandshake, AWorkerTakesNoBigFrameFromAPeerThatProvedNothing) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener = FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  int key_pipe[2];
  ASSERT_EQ(::pipe(key_pipe), 0);
  ASSERT_EQ(::write(key_pipe[1], "k", 1), 1);
  ::close(key_pipe[1]);
  absl::Status joined;
  std::thread worker([&] {
    joined = JoinAsWorker({"program", "--gpupool-worker",
                           absl::StrCat("--gpupool-worker-driver=127.0.0.1:", (*listener)->port()),
                           "--gpupool-worker-job=job-1", "--gpupool-worker-node=n0",
                           absl::StrCat("--gpupool-worker-secret-fd=", key_pipe[0])})
                 .status();
  });
  absl::StatusOr<std::unique_ptr<FrameSocket>> conn = (*listener)->Accept();
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE((*conn)->Receive(std::chrono::seconds(10)).ok());
  // A megabyte before any proof: refused by its size, at once (not held, nor waited for). The
  // worker may close the connection on reading the frame's length, before the rest is sent.
  (void)(*conn)->Send(std::string(1 << 20, 'z'));
  worker.join();
  ::close(key_pipe[0]);
  EXPECT_FALSE(joined.ok());
  EXPECT_THAT(joined.message(), HasSubstr("over the limit of 65536"));
}

TEST(WorkerHandshake, AWorkerTakesNoWelcomeFromADriverThatProvedNothing) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener = FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  int key_pipe[2];
  ASSERT_EQ(::pipe(key_pipe), 0);
  ASSERT_EQ(::write(key_pipe[1], "k", 1), 1);
  ::close(key_pipe[1]);
  absl::Status joined;
  std::thread worker([&] {
    joined = JoinAsWorker({"program", "--gpupool-worker",
                           absl::StrCat("--gpupool-worker-driver=127.0.0.1:", (*listener)->port()),
                           "--gpupool-worker-job=job-1", "--gpupool-worker-node=n0",
                           absl::StrCat("--gpupool-worker-secret-fd=", key_pipe[0])})
                 .status();
  });
  absl::StatusOr<std::unique_ptr<FrameSocket>> conn = (*listener)->Accept();
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE((*conn)->Receive(std::chrono::seconds(10)).ok());
  // Straight to a Welcome that would hand it tasks, skipping the challenge.
  wire::Welcome welcome{.team = "t", .object_id_base = wire::kWorkerIdBase + wire::kWorkerIdSpan};
  ASSERT_TRUE((*conn)->Send(wire::Encode(welcome)).ok());
  worker.join();
  ::close(key_pipe[0]);
  EXPECT_EQ(joined.code(), absl::StatusCode::kPermissionDenied) << joined;
  EXPECT_THAT(joined.message(), HasSubstr("without proving it holds the worker key of job job-1"));
}

}  // namespace
}  // namespace gpupool::runtime
