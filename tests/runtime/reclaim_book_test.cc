// ReclaimBook: what the head keeps for jobs that are away, and what it lets go of.
#include "runtime/service/reclaim_book.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpupool::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Clock = ReclaimBook::Clock;

pool::Lease LeaseOf(const std::string& request_id, const std::string& lease_id) {
  pool::Lease l;
  l.id = lease_id;
  l.request.id = request_id;
  return l;
}

ReclaimBook::KeptRequest Kept(const std::string& key, const std::string& client_id, Clock::time_point until) {
  return {.job_key = key, .client_id = client_id, .team = "vision", .until = until};
}

TEST(ReclaimBook, OnlyTheJobsOwnKeyTakesBackAndAnEmptyKeyNever) {
  ReclaimBook book;
  const auto until = Clock::now() + std::chrono::seconds(30);
  book.KeepLease("s1/a#1", "key-1", until);
  book.KeepLease("s1/b#1", "", until);  // a job without a key: nobody may take it back
  book.KeepRequest("s1/c", Kept("key-1", "c", until));
  EXPECT_FALSE(book.TakeLease("s1/a#1", "key-2"));
  EXPECT_FALSE(book.TakeLease("s1/b#1", ""));
  EXPECT_FALSE(book.TakeRequest("key-2", "c").has_value());
  EXPECT_FALSE(book.TakeRequest("", "c").has_value());
  EXPECT_TRUE(book.TakeLease("s1/a#1", "key-1"));
  EXPECT_FALSE(book.TakeLease("s1/a#1", "key-1")) << "taken twice";
  auto c = book.TakeRequest("key-1", "c");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->first, "s1/c");
  EXPECT_EQ(book.request_count(), 0u);
}

TEST(ReclaimBook, ARequestGrantedWhileAwayIsTakenBackWithItsLeaseByEitherName) {
  ReclaimBook book;
  const auto until = Clock::now() + std::chrono::seconds(30);
  book.KeepRequest("s2/r", Kept("k", "r", until));
  EXPECT_FALSE(book.Granted(LeaseOf("s2/other", "s2/other#1"))) << "not a kept request";
  ASSERT_TRUE(book.Granted(LeaseOf("s2/r", "s2/r#1")));
  EXPECT_TRUE(book.KeepsLease("s2/r#1"));
  auto r = book.TakeRequest("k", "r");
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->second.granted.has_value());
  EXPECT_EQ(r->second.granted->id, "s2/r#1");
  EXPECT_FALSE(book.KeepsLease("s2/r#1")) << "the lease went with its request";

  // The same kept as a lease and as a grant (a restart): taking the lease takes the request too.
  book.KeepGranted(LeaseOf("s3/q", "s3/q#1"), "k", "vision", until);
  EXPECT_TRUE(book.TakeLease("s3/q#1", "k"));
  EXPECT_FALSE(book.TakeRequest("k", "q").has_value());
}

TEST(ReclaimBook, ALostLeaseTakesItsGrantedRequestWithIt) {
  ReclaimBook book;
  const auto until = Clock::now() + std::chrono::seconds(30);
  book.KeepRequest("s2/r", Kept("k", "r", until));
  ASSERT_TRUE(book.Granted(LeaseOf("s2/r", "s2/r#1")));
  EXPECT_TRUE(book.Lost("s2/r#1"));
  EXPECT_FALSE(book.Lost("s2/r#1"));
  EXPECT_FALSE(book.TakeRequest("k", "r").has_value()) << "its job sends it again";
}

TEST(ReclaimBook, WhatTheJobDidNotNameAndWhatExpiredGoBack) {
  ReclaimBook book;
  const auto now = Clock::now();
  book.KeepLease("s1/a#1", "k", now + std::chrono::seconds(30));
  book.KeepRequest("s1/b", Kept("k", "b", now + std::chrono::seconds(30)));
  book.KeepRequest("s1/c", Kept("k", "c", now + std::chrono::seconds(30)));
  ASSERT_TRUE(book.Granted(LeaseOf("s1/c", "s1/c#1")));
  book.KeepRequest("s9/x", Kept("other", "x", now + std::chrono::seconds(1)));
  book.KeepLease("s9/y#1", "other", now + std::chrono::seconds(1));

  ReclaimBook::Dropped rest = book.TakeRest("k");
  EXPECT_THAT(rest.leases, ElementsAre("s1/a#1", "s1/c#1"));  // the granted request's lease too
  EXPECT_THAT(rest.requests, ElementsAre("s1/b"));            // never granted: withdrawn
  EXPECT_TRUE(book.TakeRest("k").empty());

  EXPECT_TRUE(book.TakeExpired(now).empty()) << "nothing is due yet";
  ReclaimBook::Dropped expired = book.TakeExpired(now + std::chrono::seconds(2));
  EXPECT_THAT(expired.leases, ElementsAre("s9/y#1"));
  EXPECT_THAT(expired.requests, ElementsAre("s9/x"));
  EXPECT_EQ(book.lease_count() + book.request_count(), 0u);
}

// Two kept requests with one job key and one id (a session found dead after its job came back
// and asked again): the older one's going does not hide the newer one.
TEST(ReclaimBook, AnOlderRequestOfTheSameNameLeavingKeepsTheNewerFindable) {
  ReclaimBook book;
  const auto now = Clock::now();
  book.KeepRequest("s1/r", Kept("k", "r", now + std::chrono::seconds(1)));
  book.KeepRequest("s2/r", Kept("k", "r", now + std::chrono::seconds(30)));
  EXPECT_THAT(book.TakeExpired(now + std::chrono::seconds(2)).requests, ElementsAre("s1/r"));
  auto r = book.TakeRequest("k", "r");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, "s2/r");
  EXPECT_THAT(book.TakeRest("k").requests, IsEmpty());
}

}  // namespace
}  // namespace gpupool::runtime
