#include "transport/object_transfer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "tests/transport/test_peer_process.h"
#include "transport/fetch_wire.h"

namespace gpupool::transport {
namespace {

using ::testing::HasSubstr;
using testing::Checksum;
using testing::PatternId;
using testing::PeerProcess;

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<UcxWorker> MakeWorker(const std::string& transports, const std::string& name) {
  absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create(
      {.transports = transports, .detect_peer_failure = transports != "shm", .name = name});
  EXPECT_TRUE(worker.ok()) << worker.status();
  return worker.ok() ? *std::move(worker) : nullptr;
}

std::unique_ptr<PeerProcess> StartOwner(const std::string& transports, const std::string& sizes) {
  absl::StatusOr<std::unique_ptr<PeerProcess>> owner =
      PeerProcess::Start({"owner", "--transports=" + transports, "--sizes=" + sizes});
  EXPECT_TRUE(owner.ok()) << owner.status();
  return owner.ok() ? *std::move(owner) : nullptr;
}

// Objects of 0 B, 1 B, 1 MiB and 64 MiB from an owner process, into new buffers and into caller
// memory, checked against the checksums the owner computed over what it serves.
class ObjectTransferSizes : public ::testing::TestWithParam<std::string> {};

TEST_P(ObjectTransferSizes, FetchesMatchTheOwnersChecksums) {
  const std::vector<size_t> sizes = {0, 1, kMiB, 64 * kMiB};
  std::unique_ptr<PeerProcess> owner_process =
      StartOwner(GetParam(), absl::StrCat(sizes[0], ",", sizes[1], ",", sizes[2], ",", sizes[3]));
  ASSERT_NE(owner_process, nullptr);
  std::unique_ptr<UcxWorker> worker = MakeWorker(GetParam(), "fetcher");
  absl::StatusOr<std::unique_ptr<ObjectFetcher>> fetcher = ObjectFetcher::Create(*worker);
  ASSERT_TRUE(fetcher.ok());
  absl::StatusOr<PeerId> owner = worker->Connect(owner_process->address(), "owner");
  ASSERT_TRUE(owner.ok());
  std::vector<std::byte> caller_memory(64 * kMiB + 7);
  for (size_t size : sizes) {
    const std::string id = PatternId(size);
    const uint64_t expected = owner_process->checksums().at(id);
    absl::StatusOr<FetchedObject> object = (*fetcher)->Fetch(*owner, id);
    ASSERT_TRUE(object.ok()) << object.status();
    EXPECT_EQ(object->size, size);
    EXPECT_EQ(Checksum(object->bytes()), expected) << id;

    absl::StatusOr<size_t> got = (*fetcher)->FetchInto(*owner, id, absl::MakeSpan(caller_memory));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, size);
    EXPECT_EQ(Checksum(absl::MakeConstSpan(caller_memory).first(size)), expected) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ObjectTransferSizes, ::testing::Values("tcp", "shm"));

// In-process owner and fetcher (two workers over loopback tcp), for the error paths.
class ObjectTransferInProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    owner_worker_ = MakeWorker("tcp", "owner");
    fetcher_worker_ = MakeWorker("tcp", "fetcher");
    ASSERT_TRUE(owner_worker_ && fetcher_worker_);
    ASSERT_TRUE(registry_.Add("small", small_).ok());
    absl::StatusOr<std::unique_ptr<ObjectServer>> server =
        ObjectServer::Start(*owner_worker_, registry_.AsLookup());
    ASSERT_TRUE(server.ok());
    server_ = *std::move(server);
    absl::StatusOr<std::unique_ptr<ObjectFetcher>> fetcher = ObjectFetcher::Create(*fetcher_worker_);
    ASSERT_TRUE(fetcher.ok());
    fetcher_ = *std::move(fetcher);
    absl::StatusOr<PeerId> owner = fetcher_worker_->Connect(owner_worker_->address(), "owner-A");
    ASSERT_TRUE(owner.ok());
    owner_ = *owner;
  }
  void TearDown() override {
    fetcher_.reset();
    server_.reset();
    (void)registry_.Remove("small");
  }

  const std::vector<std::byte> small_ = testing::Pattern(100);
  ObjectRegistry registry_;
  std::unique_ptr<UcxWorker> owner_worker_, fetcher_worker_;
  std::unique_ptr<ObjectServer> server_;
  std::unique_ptr<ObjectFetcher> fetcher_;
  PeerId owner_ = 0;
};

TEST_F(ObjectTransferInProcess, UnknownIdIsNotFoundNamingTheIdAndTheOwner) {
  absl::StatusOr<FetchedObject> object = fetcher_->Fetch(owner_, "no-such-object");
  EXPECT_EQ(object.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(object.status().message(), HasSubstr("no-such-object"));
  EXPECT_THAT(object.status().message(), HasSubstr("owner-A"));
  EXPECT_EQ(server_->stats().not_found, 1u);
}

TEST_F(ObjectTransferInProcess, ObjectLargerThanTheCallersBufferIsOutOfRange) {
  std::vector<std::byte> too_small(small_.size() - 1);
  absl::StatusOr<size_t> got = fetcher_->FetchInto(owner_, "small", absl::MakeSpan(too_small));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(got.status().message(), HasSubstr("100 bytes"));
}

TEST_F(ObjectTransferInProcess, OverlongIdIsRefusedBeforeSending) {
  absl::StatusOr<FetchedObject> object =
      fetcher_->Fetch(owner_, std::string(kMaxObjectIdBytes + 1, 'x'));
  EXPECT_EQ(object.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ObjectTransferInProcess, OwnerThatNeverAnswersTimesOut) {
  // A worker with no ObjectServer drops the requests.
  std::unique_ptr<UcxWorker> silent = MakeWorker("tcp", "silent");
  absl::StatusOr<PeerId> peer = fetcher_worker_->Connect(silent->address(), "silent-owner");
  ASSERT_TRUE(peer.ok());
  absl::Time start = absl::Now();
  absl::StatusOr<FetchedObject> object =
      fetcher_->Fetch(*peer, "small", {.timeout = absl::Milliseconds(300)});
  EXPECT_EQ(object.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(object.status().message(), HasSubstr("silent-owner"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The fetcher and the real owner are unaffected.
  EXPECT_TRUE(fetcher_->Fetch(owner_, "small").ok());
}

TEST_F(ObjectTransferInProcess, MalformedRequestsAreCountedAndDroppedAndServingGoesOn) {
  std::string valid = EncodeFetchRequest(7, "small");
  std::vector<std::string> garbage = {
      "",                                         // empty
      "xyz",                                      // too short
      std::string(64, '\xff'),                    // bad magic
      valid.substr(0, valid.size() - 1),          // truncated id
      valid + "tail",                             // id size disagrees with the bytes present
      EncodeFetchRequest(8, std::string(kMaxObjectIdBytes + 1, 'y')),  // id over the bound
  };
  std::string payload(64, 'p');
  absl::Notification sent_all;
  std::atomic<int> sent{0};
  int total = static_cast<int>(garbage.size()) + 1;
  fetcher_worker_->Post([&] {
    for (const std::string& header : garbage) {
      fetcher_worker_->SendAm(owner_, AmId::kFetchRequest, header, nullptr, 0, true,
                              [&](absl::Status) {
                                if (++sent == total) sent_all.Notify();
                              });
    }
    // A well-formed header with a payload a request never has.
    fetcher_worker_->SendAm(owner_, AmId::kFetchRequest, valid, payload.data(), payload.size(),
                            true, [&](absl::Status) {
                              if (++sent == total) sent_all.Notify();
                            });
  });
  ASSERT_TRUE(sent_all.WaitForNotificationWithTimeout(absl::Seconds(5)));
  absl::StatusOr<FetchedObject> object = fetcher_->Fetch(owner_, "small");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(Checksum(object->bytes()), Checksum(small_));
  EXPECT_EQ(server_->stats().rejected, static_cast<uint64_t>(total));
  EXPECT_EQ(server_->stats().served, 1u);
}

// A server with an access key serves only fetchers that present it; the others cannot even tell
// an object that exists from one that does not.
TEST_F(ObjectTransferInProcess, OnlyFetchersWithTheOwnersAccessKeyAreServed) {
  std::unique_ptr<UcxWorker> keyed_worker = MakeWorker("tcp", "keyed-owner");
  ASSERT_TRUE(keyed_worker);
  server_.reset();  // one server per worker: the keyed one gets its own
  absl::StatusOr<std::unique_ptr<ObjectServer>> keyed =
      ObjectServer::Start(*keyed_worker, registry_.AsLookup(), "job-key-0123456789");
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  absl::StatusOr<PeerId> owner = fetcher_worker_->Connect(keyed_worker->address(), "keyed-owner");
  ASSERT_TRUE(owner.ok());

  // fetcher_ presents no key.
  absl::StatusOr<FetchedObject> without = fetcher_->Fetch(*owner, "small");
  EXPECT_EQ(without.status().code(), absl::StatusCode::kPermissionDenied) << without.status();
  absl::StatusOr<FetchedObject> missing = fetcher_->Fetch(*owner, "no-such-object");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kPermissionDenied) << missing.status();
  fetcher_.reset();  // one fetcher per worker as well

  absl::StatusOr<std::unique_ptr<ObjectFetcher>> wrong = ObjectFetcher::Create(*fetcher_worker_, "job-key-0123456780");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ((*wrong)->Fetch(*owner, "small").status().code(), absl::StatusCode::kPermissionDenied);
  wrong->reset();

  absl::StatusOr<std::unique_ptr<ObjectFetcher>> right = ObjectFetcher::Create(*fetcher_worker_, "job-key-0123456789");
  ASSERT_TRUE(right.ok());
  absl::StatusOr<FetchedObject> object = (*right)->Fetch(*owner, "small");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(Checksum(object->bytes()), Checksum(small_));
  EXPECT_EQ((*keyed)->stats().refused, 3u);
  EXPECT_EQ((*keyed)->stats().served, 1u);
  right->reset();
  keyed->reset();
  EXPECT_EQ(ObjectServer::Start(*keyed_worker, registry_.AsLookup(), std::string(kMaxAccessKeyBytes + 1, 'k'))
                .status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ObjectTransferInProcess, ManyThreadsFetchAtOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        absl::StatusOr<FetchedObject> object = fetcher_->Fetch(owner_, "small");
        if (object.ok() && Checksum(object->bytes()) == Checksum(small_)) ++good;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(good.load(), 200);
}

TEST_F(ObjectTransferInProcess, FetchFromItsOwnWorker) {
  absl::StatusOr<std::unique_ptr<ObjectServer>> own_server =
      ObjectServer::Start(*fetcher_worker_, registry_.AsLookup());
  ASSERT_TRUE(own_server.ok());
  absl::StatusOr<PeerId> self = fetcher_worker_->Connect(fetcher_worker_->address(), "self");
  ASSERT_TRUE(self.ok());
  absl::StatusOr<FetchedObject> object = fetcher_->Fetch(*self, "small");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(Checksum(object->bytes()), Checksum(small_));
}

// Two owner processes serving `sizes`, and this process's worker and fetcher connected to both.
struct TwoOwners {
  std::unique_ptr<PeerProcess> a, b;
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<ObjectFetcher> fetcher;
  PeerId owner_a = 0, owner_b = 0;

  // False (with test failures recorded) when something did not start.
  bool Start(const std::string& transports, const std::string& sizes, const std::string& name_a,
             const std::string& name_b) {
    a = StartOwner(transports, sizes);
    b = StartOwner(transports, sizes);
    worker = MakeWorker(transports, "fetcher");
    if (!a || !b || !worker) return false;
    absl::StatusOr<std::unique_ptr<ObjectFetcher>> f = ObjectFetcher::Create(*worker);
    absl::StatusOr<PeerId> pa = worker->Connect(a->address(), name_a);
    absl::StatusOr<PeerId> pb = worker->Connect(b->address(), name_b);
    EXPECT_TRUE(f.ok() && pa.ok() && pb.ok());
    if (!f.ok() || !pa.ok() || !pb.ok()) return false;
    fetcher = *std::move(f);
    owner_a = *pa;
    owner_b = *pb;
    return true;
  }
};

bool Arrived(const std::byte* p, const std::vector<std::byte>& expected, size_t offset) {
  // Racy on purpose: UCX writes the buffer from the loop thread while this reads it.
  for (size_t i = 0; i < 4096; i += 8) {
    uint64_t have = __atomic_load_n(reinterpret_cast<const uint64_t*>(p + offset + i),
                                    __ATOMIC_RELAXED);
    uint64_t want;
    std::memcpy(&want, expected.data() + offset + i, 8);
    if (have != want) return false;
  }
  return true;
}

// Owner A is SIGKILLed while a 64 MiB object streams from it (first bytes landed, last not yet):
// that fetch fails Unavailable within seconds; a fetch from owner B running at the same time,
// and one after, succeed.
TEST(ObjectTransfer, OwnerKilledMidTransferFailsOnlyThatFetch) {
  const size_t size = 64 * kMiB;
  const std::string id = PatternId(size);
  TwoOwners owners;
  ASSERT_TRUE(owners.Start("tcp", absl::StrCat(size), "owner-A", "owner-B"));
  PeerProcess* a = owners.a.get();
  PeerProcess* b = owners.b.get();
  ObjectFetcher* fetcher = owners.fetcher.get();
  const PeerId owner_a = owners.owner_a, owner_b = owners.owner_b;
  // Wire both endpoints up first, so the kill lands during the transfer, not the handshake.
  ASSERT_TRUE(fetcher->Fetch(owner_a, "warm-up").status().code() ==
              absl::StatusCode::kNotFound);
  const std::vector<std::byte> expected = testing::Pattern(size);
  std::vector<std::byte> dst(size);

  std::promise<absl::StatusOr<FetchedObject>> from_a, from_b;
  fetcher->FetchIntoAsync(owner_a, id, absl::MakeSpan(dst), {},
                             [&](absl::StatusOr<FetchedObject> r) { from_a.set_value(std::move(r)); });
  fetcher->FetchAsync(owner_b, id, {},
                         [&](absl::StatusOr<FetchedObject> r) { from_b.set_value(std::move(r)); });
  absl::Time start = absl::Now();
  bool mid_transfer = false;
  while (absl::Now() - start < absl::Seconds(10)) {
    if (Arrived(dst.data(), expected, 0)) {
      mid_transfer = !Arrived(dst.data(), expected, size - 4096);
      break;
    }
  }
  a->Kill();
  absl::Time killed = absl::Now();
  ASSERT_TRUE(mid_transfer) << "the transfer finished (or never began) before the kill";

  std::future<absl::StatusOr<FetchedObject>> a_result = from_a.get_future();
  ASSERT_EQ(a_result.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  absl::StatusOr<FetchedObject> failed = a_result.get();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_THAT(failed.status().message(), HasSubstr("owner-A"));
  EXPECT_THAT(failed.status().message(), HasSubstr(id));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));

  absl::StatusOr<FetchedObject> concurrent = from_b.get_future().get();
  ASSERT_TRUE(concurrent.ok()) << concurrent.status();
  EXPECT_EQ(Checksum(concurrent->bytes()), b->checksums().at(id));
  absl::StatusOr<FetchedObject> after = fetcher->Fetch(owner_b, id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(Checksum(after->bytes()), b->checksums().at(id));
  // The dead owner fails at once from now on.
  EXPECT_EQ(fetcher->Fetch(owner_a, id).status().code(), absl::StatusCode::kUnavailable);
}

// A fetcher process dies while this process sends it 64 MiB: the reply fails, its bytes are
// released (Remove returns) and the next fetcher is served.
TEST(ObjectTransfer, OwnerKeepsServingWhenAFetcherDiesMidTransfer) {
  const size_t size = 64 * kMiB;
  const std::string id = PatternId(size);
  const std::vector<std::byte> object = testing::Pattern(size);
  std::unique_ptr<UcxWorker> worker = MakeWorker("tcp", "owner");
  ObjectRegistry registry;
  ASSERT_TRUE(registry.Add(id, object).ok());
  absl::StatusOr<std::unique_ptr<ObjectServer>> server =
      ObjectServer::Start(*worker, registry.AsLookup());
  ASSERT_TRUE(server.ok());
  const std::string address_hex = testing::HexEncode(worker->address());

  absl::StatusOr<std::unique_ptr<PeerProcess>> doomed = PeerProcess::Start(
      {"fetcher", "--transports=tcp", "--owner=" + address_hex, "--id=" + id});
  ASSERT_TRUE(doomed.ok()) << doomed.status();
  // Let it complete one fetch, then kill it during one of the next ones.
  absl::StatusOr<std::string> line = (*doomed)->ReadLine(absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, absl::StrCat("fetched ", size, " ", Checksum(object)));
  absl::SleepFor(absl::Milliseconds(30));
  (*doomed)->Kill();
  (*doomed)->Wait();

  absl::StatusOr<std::unique_ptr<PeerProcess>> next = PeerProcess::Start(
      {"fetcher", "--transports=tcp", "--owner=" + address_hex, "--id=" + id, "--count=1"});
  ASSERT_TRUE(next.ok()) << next.status();
  line = (*next)->ReadLine(absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_EQ(*line, absl::StrCat("fetched ", size, " ", Checksum(object)));

  server->reset();  // waits for every reply in flight, the dead fetcher's included
  std::future<absl::Status> removed =
      std::async(std::launch::async, [&] { return registry.Remove(id); });
  ASSERT_EQ(removed.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(removed.get().ok());
}

// Over shared memory UCX cannot report a dead peer (UcxOptions::detect_peer_failure is off):
// the fetch's deadline is what notices, and the fetcher goes on working.
TEST(ObjectTransfer, DeadShmOwnerIsNoticedByTheDeadline) {
  TwoOwners owners;
  ASSERT_TRUE(owners.Start("shm", "1024", "dead-owner", "live-owner"));
  PeerProcess* dead = owners.a.get();
  PeerProcess* alive = owners.b.get();
  ObjectFetcher* fetcher = owners.fetcher.get();
  const PeerId dead_owner = owners.owner_a, live_owner = owners.owner_b;
  ASSERT_TRUE(fetcher->Fetch(dead_owner, PatternId(1024)).ok());
  dead->Kill();
  dead->Wait();
  absl::StatusOr<FetchedObject> lost =
      fetcher->Fetch(dead_owner, PatternId(1024), {.timeout = absl::Milliseconds(300)});
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDeadlineExceeded) << lost.status();
  EXPECT_THAT(lost.status().message(), HasSubstr("dead-owner"));
  absl::StatusOr<FetchedObject> object = fetcher->Fetch(live_owner, PatternId(1024));
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(Checksum(object->bytes()), alive->checksums().at(PatternId(1024)));
}

TEST(ObjectRegistry, AddTwiceIsAlreadyExistsAndRemoveUnknownIsNotFound) {
  ObjectRegistry registry;
  std::vector<std::byte> bytes(3);
  ASSERT_TRUE(registry.Add("x", bytes).ok());
  EXPECT_EQ(registry.Add("x", bytes).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Remove("y").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry.Remove("x").ok());
}

TEST(ObjectRegistry, RemoveThenRunsOnceTheLastReaderIsDoneWithoutWaitingForIt) {
  ObjectRegistry registry;
  std::vector<std::byte> bytes(3);
  ASSERT_TRUE(registry.Add("x", bytes).ok());
  ObjectLookup lookup = registry.AsLookup();
  absl::StatusOr<ServedObject> reading = lookup("x");  // a transfer under way
  ASSERT_TRUE(reading.ok());
  int done = 0;
  EXPECT_TRUE(registry.RemoveThen("x", [&done] { ++done; }).ok());  // returns at once
  EXPECT_EQ(done, 0) << "ran while a transfer still read the bytes";
  EXPECT_EQ(lookup("x").status().code(), absl::StatusCode::kNotFound) << "served after its removal";
  std::move(reading->release)();
  EXPECT_EQ(done, 1);
  // Nothing reading, or not served at all: at once.
  ASSERT_TRUE(registry.Add("y", bytes).ok());
  EXPECT_TRUE(registry.RemoveThen("y", [&done] { ++done; }).ok());
  EXPECT_EQ(registry.RemoveThen("z", [&done] { ++done; }).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(done, 3);
}

}  // namespace
}  // namespace gpupool::transport
