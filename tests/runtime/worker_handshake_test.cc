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
  std::string challenge_frame;  // the last Challenged's, as it came
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
  // Hello, answered with the driver's challenge (failing the test when it is anything else).
  wire::Challenge Challenged(uint16_t port, const std::string& job) {
    absl::StatusOr<std::string> frame = Hello(port, job);
    EXPECT_TRUE(frame.ok()) << frame.status();
    challenge_frame = frame.ok() ? *frame : "";
    absl::StatusOr<wire::Challenge> challenge = wire::DecodeChallenge(challenge_frame);
    EXPECT_TRUE(challenge.ok()) << challenge.status();
    return challenge.ok() ? *challenge : wire::Challenge{};
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
  wire::Challenge challenge = guesser.Challenged(port, "job-1");
  EXPECT_TRUE(ProofHolds(challenge.proof, "the-job-key", ProofRole::kDriver, "job-1", guesser.nonce, challenge.nonce));
  EXPECT_THAT(guesser.challenge_frame, Not(HasSubstr("the-job-key")));
  ASSERT_TRUE(guesser.socket->Send(wire::Encode(wire::Proof{.proof = std::string(32, 'x')})).ok());
  EXPECT_THAT(guesser.Refusal(), HasSubstr("did not prove it holds the job's worker key"));

  // The driver's own proof sent back as the worker's: roles differ, so it is refused too.
  Caller replayer;
  challenge = replayer.Challenged(port, "job-1");
  ASSERT_TRUE(replayer.socket->Send(wire::Encode(wire::Proof{.proof = challenge.proof})).ok());
  EXPECT_THAT(replayer.Refusal(), HasSubstr("did not prove"));

  // With the key: past the proof (refused only because this driver started no worker on n0).
  Caller worker;
  challenge = worker.Challenged(port, "job-1");
  ASSERT_TRUE(worker.socket
                  ->Send(wire::Encode(wire::Proof{
                      .proof = JobProof("the-job-key", ProofRole::kWorker, "job-1", worker.nonce, challenge.nonce)}))
                  .ok());
  EXPECT_THAT(worker.Refusal(), HasSubstr("did not ask for a worker on node n0"));

  // Another job's worker is told at once, before any challenge.
  Caller stranger;
  absl::StatusOr<std::string> frame = stranger.Hello(port, "job-2");
  ASSERT_TRUE(frame.ok()) << frame.status();
  absl::StatusOr<wire::Welcome> refused = wire::DecodeWelcome(*frame);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_THAT(refused->refusal, HasSubstr("not that job's driver"));
}

// A worker (JoinAsWorker on its own thread, the job's key in a pipe as its agent hands it) joining
// an impostor listening where it was told its driver is; the test plays the impostor on `conn`.
class ImpostorDriver : public ::testing::Test {
 protected:
  static constexpr char kKey[] = "the-job-key";
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<FrameListener>> listener = FrameListener::Listen("127.0.0.1", 0);
    ASSERT_TRUE(listener.ok()) << listener.status();
    int key_pipe[2];
    ASSERT_EQ(::pipe(key_pipe), 0);
    ASSERT_EQ(::write(key_pipe[1], kKey, sizeof(kKey) - 1), static_cast<ssize_t>(sizeof(kKey) - 1));
    ::close(key_pipe[1]);
    key_fd_ = key_pipe[0];
    worker_ = std::thread([this, port = (*listener)->port()] {
      joined_ = JoinAsWorker({"program", "--gpupool-worker", absl::StrCat("--gpupool-worker-driver=127.0.0.1:", port),
                              "--gpupool-worker-job=job-1", "--gpupool-worker-node=n0",
                              absl::StrCat("--gpupool-worker-secret-fd=", key_fd_)})
                    .status();
    });
    absl::StatusOr<std::unique_ptr<FrameSocket>> conn = (*listener)->Accept();
    ASSERT_TRUE(conn.ok()) << conn.status();
    conn_ = *std::move(conn);
    absl::StatusOr<std::string> hello = conn_->Receive(std::chrono::seconds(10));
    ASSERT_TRUE(hello.ok()) << hello.status();
    hello_ = *hello;
  }
  void TearDown() override {
    if (worker_.joinable()) worker_.join();
    if (key_fd_ >= 0) ::close(key_fd_);
  }
  // How the worker's join ended.
  absl::Status Joined() {
    worker_.join();
    return joined_;
  }

  std::unique_ptr<FrameSocket> conn_;
  std::string hello_;

 private:
  int key_fd_ = -1;
  std::thread worker_;
  absl::Status joined_;
};

TEST_F(ImpostorDriver, AWorkerRefusesADriverThatCannotProveTheKeyAndNeverSendsIt) {
  EXPECT_THAT(hello_, Not(HasSubstr(kKey))) << "the worker sent the job's key";
  ASSERT_TRUE(conn_->Send(wire::Encode(wire::Challenge{.nonce = "impostor", .proof = std::string(32, 'y')})).ok());
  const absl::Status joined = Joined();
  EXPECT_EQ(joined.code(), absl::StatusCode::kPermissionDenied) << joined;
  EXPECT_THAT(joined.message(), HasSubstr("did not prove it holds the worker key of job job-1"));
  // And it said nothing more: its connection ends without a proof of its own.
  EXPECT_FALSE(conn_->Receive(std::chrono::seconds(5)).ok()) << "the worker answered an impostor's challenge";
}

TEST_F(ImpostorDriver, AWorkerTakesNoBigFrameFromAPeerThatProvedNothing) {
  // A megabyte before any proof: refused by its size, at once (not held, nor waited for). The
  // worker may close the connection on reading the frame's length, before the rest is sent.
  (void)conn_->Send(std::string(1 << 20, 'z'));
  const absl::Status joined = Joined();
  EXPECT_FALSE(joined.ok());
  EXPECT_THAT(joined.message(), HasSubstr("over the limit of 65536"));
}

TEST_F(ImpostorDriver, AWorkerTakesNoWelcomeFromADriverThatProvedNothing) {
  // Straight to a Welcome that would hand it tasks, skipping the challenge.
  wire::Welcome welcome{.team = "t", .object_id_base = wire::kWorkerIdBase + wire::kWorkerIdSpan};
  ASSERT_TRUE(conn_->Send(wire::Encode(welcome)).ok());
  const absl::Status joined = Joined();
  EXPECT_EQ(joined.code(), absl::StatusCode::kPermissionDenied) << joined;
  EXPECT_THAT(joined.message(), HasSubstr("without proving it holds the worker key of job job-1"));
}

}  // namespace
}  // namespace gpupool::runtime
