// File: runtime/rpc/frame_socket.h
//
// A TCP connection that carries frames: each a 4-byte little-endian length, then that many bytes.
// What a job's driver and its worker processes speak (runtime/tasks/worker_protocol.h): the
// frames are batches of tasks and their outcomes, so the cost of a system call is shared by many
// tasks (one frame of 1,000 no-op tasks is one write and one read).
//
//   absl::StatusOr<std::unique_ptr<FrameSocket>> s = FrameSocket::Connect("127.0.0.1", port);
//   (*s)->Send(bytes);
//   absl::StatusOr<std::string> frame = (*s)->Receive();
//
// Bad input: a frame announcing more than the socket's limit, or a connection that closes
// mid-frame, is an error naming it (kDataLoss), never a crash or an unbounded allocation.
//
// Thread-safety: Send may be called from any thread (frames never interleave); Receive from one
// thread at a time. Shutdown (any thread) wakes a blocked Receive, which then fails.
#ifndef GPUPOOL_RUNTIME_RPC_FRAME_SOCKET_H_
#define GPUPOOL_RUNTIME_RPC_FRAME_SOCKET_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class FrameSocket {
 public:
  static constexpr size_t kDefaultMaxFrame = size_t{1} << 30;  // 1 GiB: a task's arguments may be big

  // Connects within `timeout`. kUnavailable naming the address when nobody listens there.
  static absl::StatusOr<std::unique_ptr<FrameSocket>> Connect(const std::string& host, uint16_t port,
                                                              std::chrono::milliseconds timeout);
  // Takes over a connected socket (an accepted one); `peer` names it in errors.
  FrameSocket(int fd, std::string peer, size_t max_frame = kDefaultMaxFrame);
  ~FrameSocket();  // closes
  FrameSocket(const FrameSocket&) = delete;
  FrameSocket& operator=(const FrameSocket&) = delete;

  absl::Status Send(std::string_view frame) ABSL_LOCKS_EXCLUDED(send_mu_);
  // The next frame. kUnavailable when the peer closed between frames (or Shutdown was called);
  // kDataLoss for a frame cut short or larger than the limit; kDeadlineExceeded when `timeout`
  // (if not zero) passed with no frame.
  absl::StatusOr<std::string> Receive(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Closes both directions: a blocked Receive returns, later Sends fail.
  void Shutdown();
  const std::string& peer() const { return peer_; }
  // A new limit for frames, e.g. raised once a peer admitted under a small one proved who it is.
  void SetMaxFrame(size_t max_frame) { max_frame_.store(max_frame); }

 private:
  // Fills the read buffer with at least `need` bytes. kUnavailable at a clean end of stream
  // when nothing of the frame was read yet.
  absl::Status Fill(size_t need, bool frame_started, std::chrono::steady_clock::time_point deadline);

  const int fd_;
  const std::string peer_;
  std::atomic<size_t> max_frame_;
  std::atomic<bool> shut_{false};
  Mutex send_mu_;
  // The reader's buffer: bytes read but not yet returned are [read_pos_, filled_); past filled_
  // is room for the next recv. The size only grows while a frame is read, so a big frame's bytes
  // are written once, never zero-filled again per recv. One reader at a time.
  std::string buffer_;
  size_t read_pos_ = 0;
  size_t filled_ = 0;
};

// Listens for FrameSockets on HOST:PORT (port 0: any free one).
// Whether `host` names this machine's loopback (who may reach a listener there, which network
// devices a transport between two such processes needs).
inline bool IsLoopbackHost(std::string_view host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

class FrameListener {
 public:
  static absl::StatusOr<std::unique_ptr<FrameListener>> Listen(const std::string& host, uint16_t port);
  ~FrameListener();
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  // The next connection, its frames limited to `max_frame`; kCancelled once Shutdown was called.
  absl::StatusOr<std::unique_ptr<FrameSocket>> Accept(size_t max_frame = FrameSocket::kDefaultMaxFrame);
  void Shutdown();

 private:
  FrameListener(int fd, std::string host, uint16_t port) : fd_(fd), host_(std::move(host)), port_(port) {}
  const int fd_;
  const std::string host_;
  const uint16_t port_;
  std::atomic<bool> shut_{false};
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_RPC_FRAME_SOCKET_H_
