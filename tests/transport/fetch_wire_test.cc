#include "transport/fetch_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

namespace gpupool::transport {
namespace {

TEST(FetchWire, RequestRoundTrips) {
  std::string header = EncodeFetchRequest(42, "obj-7");
  absl::StatusOr<FetchRequest> request = DecodeFetchRequest(header, 64);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->request_id, 42u);
  EXPECT_EQ(request->object_id, "obj-7");
  EXPECT_EQ(request->access_key, "");
  absl::StatusOr<FetchRequest> keyed = DecodeFetchRequest(EncodeFetchRequest(43, "obj-8", "job-key-0123"), 64);
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  EXPECT_EQ(keyed->object_id, "obj-8");
  EXPECT_EQ(keyed->access_key, "job-key-0123");
}

TEST(FetchWire, AnOverlongAccessKeyIsRefused) {
  std::string header = EncodeFetchRequest(1, "obj", std::string(kMaxAccessKeyBytes + 1, 'k'));
  absl::StatusOr<FetchRequest> request = DecodeFetchRequest(header, 64);
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request.status().message(), ::testing::HasSubstr("access key"));
}

TEST(FetchWire, ReplyRoundTripsWithStatusAndSize) {
  absl::StatusOr<FetchReply> ok = DecodeFetchReply(EncodeFetchReply(9, absl::OkStatus(), 1234));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->request_id, 9u);
  EXPECT_EQ(ok->object_size, 1234u);
  EXPECT_TRUE(ok->status.ok());
  absl::StatusOr<FetchReply> missing =
      DecodeFetchReply(EncodeFetchReply(10, absl::NotFoundError("gone"), 0));
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, absl::NotFoundError("gone"));
}

TEST(FetchWire, ReplyMessageIsBounded) {
  std::string reply = EncodeFetchReply(1, absl::InternalError(std::string(5000, 'm')), 0);
  absl::StatusOr<FetchReply> decoded = DecodeFetchReply(reply);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->status.message().size(), kMaxReplyMessageBytes);
}

TEST(FetchWire, EveryTruncationAndExtensionIsRejected) {
  std::string request = EncodeFetchRequest(1, "abc", "key");
  std::string reply = EncodeFetchReply(1, absl::NotFoundError("x"), 0);
  for (size_t n = 0; n < request.size(); ++n) {
    EXPECT_FALSE(DecodeFetchRequest(request.substr(0, n), 64).ok()) << n;
  }
  for (size_t n = 0; n < reply.size(); ++n) {
    EXPECT_FALSE(DecodeFetchReply(reply.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeFetchRequest(request + "z", 64).ok());
  EXPECT_FALSE(DecodeFetchReply(reply + "z").ok());
  EXPECT_FALSE(DecodeFetchRequest(request, 2).ok()) << "id over the bound";
}

TEST(FetchWire, RandomBytesNeverDecodeAsSomethingElse) {
  std::mt19937_64 random(7);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(random() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    if (i % 2 == 0 && bytes.size() >= 4) bytes.replace(0, 4, i % 4 == 0 ? "GPF2" : "GPR1");
    absl::StatusOr<FetchRequest> request = DecodeFetchRequest(bytes, 1024);
    if (request.ok()) {
      EXPECT_EQ(bytes.size(), kFetchRequestFixedBytes + request->access_key.size() + request->object_id.size());
    }
    absl::StatusOr<FetchReply> reply = DecodeFetchReply(bytes);
    if (reply.ok()) {
      EXPECT_GE(bytes.size(), 28u);
    }
  }
}

}  // namespace
}  // namespace gpupool::transport
