// File: tests/runtime/loopback_frame_sockets.h
//
// Both ends of one real FrameSocket connection over loopback TCP, for tests that play one side of
// a protocol (a driver's, a worker's) against the code under test on the other.
#ifndef GPUPOOL_TESTS_RUNTIME_LOOPBACK_FRAME_SOCKETS_H_
#define GPUPOOL_TESTS_RUNTIME_LOOPBACK_FRAME_SOCKETS_H_

#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/rpc/frame_socket.h"

namespace gpupool::runtime {

struct LoopbackFrameSockets {
  std::unique_ptr<FrameListener> listener;
  std::unique_ptr<FrameSocket> client;  // the end that dialled
  std::unique_ptr<FrameSocket> server;  // the end the listener accepted (frames up to `server_limit`)
};

// Null ends (and a failed expectation) when the connection could not be made.
inline LoopbackFrameSockets ConnectOverLoopback(size_t server_limit = FrameSocket::kDefaultMaxFrame) {
  LoopbackFrameSockets p;
  absl::StatusOr<std::unique_ptr<FrameListener>> listener = FrameListener::Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status();
  if (!listener.ok()) return p;
  p.listener = *std::move(listener);
  std::thread accept([&] {
    absl::StatusOr<std::unique_ptr<FrameSocket>> s = p.listener->Accept(server_limit);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) p.server = *std::move(s);
  });
  absl::StatusOr<std::unique_ptr<FrameSocket>> c =
      FrameSocket::Connect("127.0.0.1", p.listener->port(), std::chrono::seconds(5));
  EXPECT_TRUE(c.ok()) << c.status();
  if (c.ok()) p.client = *std::move(c);
  accept.join();
  return p;
}

}  // namespace gpupool::runtime

#endif  // GPUPOOL_TESTS_RUNTIME_LOOPBACK_FRAME_SOCKETS_H_
