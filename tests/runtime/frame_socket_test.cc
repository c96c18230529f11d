// FrameSocket over real loopback TCP (runtime/rpc/frame_socket.h): frames arrive whole and in
// order, an announced size over the limit is refused before anything is allocated for it, and a
// limit raised after admission lets big frames through.
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/rpc/frame_socket.h"
#include "tests/runtime/loopback_frame_sockets.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;

TEST(FrameSocket, FramesArriveWholeAndInOrder) {
  LoopbackFrameSockets p = ConnectOverLoopback(FrameSocket::kDefaultMaxFrame);
  ASSERT_TRUE(p.server != nullptr);
  ASSERT_TRUE(p.client->Send("one").ok());
  ASSERT_TRUE(p.client->Send(std::string(100000, 'x')).ok());
  ASSERT_TRUE(p.client->Send("").ok());
  EXPECT_EQ(*p.server->Receive(), "one");
  EXPECT_EQ(*p.server->Receive(), std::string(100000, 'x'));
  EXPECT_EQ(*p.server->Receive(), "");
  absl::StatusOr<std::string> none = p.server->Receive(std::chrono::milliseconds(50));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(FrameSocket, AnAnnouncedSizeOverTheLimitIsRefusedUntilTheLimitIsRaised) {
  LoopbackFrameSockets p = ConnectOverLoopback(1024);
  ASSERT_TRUE(p.server != nullptr);
  // A sender is held to its own limit (the default): this one goes out whole.
  ASSERT_TRUE(p.client->Send(std::string(4096, 'y')).ok());
  absl::StatusOr<std::string> refused = p.server->Receive(std::chrono::seconds(5));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(refused.status().message(), HasSubstr("a frame of 4096 bytes, over the limit of 1024"));

  LoopbackFrameSockets q = ConnectOverLoopback(1024);
  ASSERT_TRUE(q.server != nullptr);
  q.server->SetMaxFrame(FrameSocket::kDefaultMaxFrame);  // admitted: big frames are fine now
  ASSERT_TRUE(q.client->Send(std::string(4096, 'y')).ok());
  absl::StatusOr<std::string> got = q.server->Receive(std::chrono::seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 4096u);
}

}  // namespace
}  // namespace gpupool::runtime
