// ReadAheadStream over a real socket pair: reads of any size see the bytes in order, whatever
// mix of buffered and direct reads serves them, and the end of the stream reads short.
#include <string>
#include <vector>

#include <kj/async-io.h>

#include "gtest/gtest.h"
#include "runtime/rpc/read_ahead_stream.h"

namespace gpupool::rpc {
namespace {

TEST(ReadAheadStream, ServesExactReadsFromOneSocketReadAndLargeOnesDirectly) {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::TwoWayPipe pipe = io.provider->newTwoWayPipe();
  ReadAheadStream in(kj::mv(pipe.ends[0]));

  // Three small "messages" and one larger than the read-ahead buffer, sent at once.
  std::string bytes;
  for (int i = 0; i < 3 * 40 + 20000; ++i) bytes.push_back(static_cast<char>('a' + i % 26));
  pipe.ends[1]->write(bytes.data(), bytes.size()).wait(io.waitScope);
  pipe.ends[1]->shutdownWrite();

  std::string got;
  auto read_exact = [&](size_t n) {
    std::vector<char> buf(n);
    size_t r = in.tryRead(buf.data(), n, n).wait(io.waitScope);
    got.append(buf.data(), r);
    return r;
  };
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(read_exact(8), 8u);   // a first word
    EXPECT_EQ(read_exact(32), 32u); // the rest
  }
  EXPECT_EQ(read_exact(20000), 20000u);  // part buffered, the remainder read directly
  EXPECT_EQ(got, bytes);
  // The end of the stream: a read for more than is left comes back short (here: nothing).
  char c;
  EXPECT_EQ(in.tryRead(&c, 1, 1).wait(io.waitScope), 0u);
}

}  // namespace
}  // namespace gpupool::rpc
