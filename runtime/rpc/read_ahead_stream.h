// File: runtime/rpc/read_ahead_stream.h
//
// A socket stream that reads ahead: each read from the socket takes whatever has arrived (up to
// 8 KiB), and later reads are served from that buffer. Cap'n Proto 0.9 reads a message in two
// exact-size reads (its first word, then the rest), and then a third that finds nothing, so a
// lease round trip of six messages cost about twenty read system calls; reading ahead makes it
// about one per burst of messages that arrived together. Writes go straight through.
//
//   auto stream = kj::heap<ReadAheadStream>(kj::mv(socket));
//   capnp::TwoPartyVatNetwork network(*stream, side, options);
//
// Not thread-safe (like the stream it wraps: one event loop).
#ifndef GPUPOOL_RUNTIME_RPC_READ_AHEAD_STREAM_H_
#define GPUPOOL_RUNTIME_RPC_READ_AHEAD_STREAM_H_

#include <algorithm>
#include <cstring>

#include <kj/async-io.h>

namespace gpupool::rpc {

class ReadAheadStream final : public kj::AsyncIoStream {
 public:
  explicit ReadAheadStream(kj::Own<kj::AsyncIoStream> inner) : inner_(kj::mv(inner)) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    return ReadFrom(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
  }
  kj::Promise<void> write(const void* buffer, size_t size) override { return inner_->write(buffer, size); }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return inner_->write(pieces);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, kj::uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(struct sockaddr* addr, kj::uint* length) override { inner_->getpeername(addr, length); }
  kj::Maybe<int> getFd() const override { return inner_->getFd(); }

 private:
  static constexpr size_t kBufferBytes = 8192;

  // Copies what is buffered, then reads ahead until `min_bytes` are there (`done` so far).
  kj::Promise<size_t> ReadFrom(kj::byte* out, size_t min_bytes, size_t max_bytes, size_t done) {
    size_t n = std::min(max_bytes - done, end_ - begin_);
    std::memcpy(out + done, buffer_ + begin_, n);
    begin_ += n;
    done += n;
    if (done >= min_bytes) return done;
    // The buffer is empty. A large remainder goes straight into the caller's memory.
    if (max_bytes - done >= kBufferBytes) {
      return inner_->tryRead(out + done, min_bytes - done, max_bytes - done).then([done](size_t got) {
        return done + got;
      });
    }
    begin_ = end_ = 0;
    return inner_->tryRead(buffer_, 1, kBufferBytes).then([this, out, min_bytes, max_bytes, done](size_t got) {
      if (got == 0) return kj::Promise<size_t>(done);  // end of stream: a short read says so
      end_ = got;
      return ReadFrom(out, min_bytes, max_bytes, done);
    });
  }

  kj::Own<kj::AsyncIoStream> inner_;
  kj::byte buffer_[kBufferBytes];
  size_t begin_ = 0;  // buffered bytes not read yet: [begin_, end_)
  size_t end_ = 0;
};

}  // namespace gpupool::rpc

#endif  // GPUPOOL_RUNTIME_RPC_READ_AHEAD_STREAM_H_
