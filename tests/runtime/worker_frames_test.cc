// Batches between a driver and its workers as frames (runtime/tasks/worker_protocol.h): a batch
// over a frame's limit is split, nothing is lost or reordered, and a result too big for any frame
// fails its task naming its size instead of never arriving. And the object messages: a fetched
// value framed straight from its box reads back the same as the plain encoding, and holds,
// borrows and id ranges survive the wire.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/tasks/run_outcome.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime::wire {
namespace {

using ::testing::HasSubstr;

TEST(WorkerFrames, ABatchThatFitsIsOneFrame) {
  Tasks tasks{.lease_id = "l1", .lease = "lease-bytes", .tasks = {}};
  for (uint64_t i = 0; i < 3; ++i) tasks.tasks.push_back(TaskToRun{.id = i, .function = "f", .args = "abc"});
  std::vector<std::string> frames = EncodeTaskFrames(tasks, 1 << 20);
  ASSERT_EQ(frames.size(), 1u);
  absl::StatusOr<Tasks> back = DecodeTasks(frames[0]);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->lease, "lease-bytes");
  EXPECT_EQ(back->tasks.size(), 3u);
}

TEST(WorkerFrames, TasksOverTheLimitGoInOrderOverSeveralFramesTheLeaseInTheFirst) {
  Tasks tasks{.lease_id = "l1", .lease = "lease-bytes", .tasks = {}};
  for (uint64_t i = 0; i < 10; ++i) {
    tasks.tasks.push_back(TaskToRun{.id = i, .function = "f", .args = std::string(300, 'a' + i)});
  }
  const size_t limit = 1000;
  std::vector<std::string> frames = EncodeTaskFrames(tasks, limit);
  ASSERT_GT(frames.size(), 3u);
  uint64_t next = 0;
  for (size_t f = 0; f < frames.size(); ++f) {
    EXPECT_LE(frames[f].size(), limit) << "frame " << f;
    absl::StatusOr<Tasks> part = DecodeTasks(frames[f]);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(part->lease_id, "l1");
    EXPECT_EQ(part->lease, f == 0 ? "lease-bytes" : "") << "frame " << f;
    for (const TaskToRun& t : part->tasks) {
      EXPECT_EQ(t.id, next);
      EXPECT_EQ(t.args, std::string(300, 'a' + next));
      ++next;
    }
  }
  EXPECT_EQ(next, 10u);
}

TEST(WorkerFrames, AResultTooBigForAnyFrameFailsItsTaskNamingItsSizeAndTheRestArrive) {
  std::vector<Outcome> outcomes;
  for (uint64_t i = 0; i < 6; ++i) {
    outcomes.push_back(Outcome{.id = i, .kind = static_cast<uint64_t>(RunOutcome::Kind::kDone),
                               .value = std::string(i == 2 ? 5000 : 200, 'v'), .location = "node-1/GPU 0"});
  }
  const size_t limit = 1000;
  std::vector<std::string> frames = EncodeOutcomeFrames(outcomes, limit);
  std::vector<Outcome> got;
  for (const std::string& frame : frames) {
    EXPECT_LE(frame.size(), limit);
    absl::StatusOr<std::vector<Outcome>> part = DecodeOutcomes(frame);
    ASSERT_TRUE(part.ok()) << part.status();
    for (Outcome& o : *part) got.push_back(std::move(o));
  }
  ASSERT_EQ(got.size(), 6u);
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(got[i].id, i);
    if (i == 2) {
      EXPECT_EQ(got[i].kind, static_cast<uint64_t>(RunOutcome::Kind::kFailed));
      EXPECT_EQ(got[i].code, static_cast<int64_t>(ErrorCode::kResourceExhausted));
      EXPECT_THAT(got[i].message, HasSubstr("its result, 5000 bytes, is over the 1000 bytes"));
      EXPECT_EQ(got[i].location, "node-1/GPU 0");
    } else {
      EXPECT_EQ(got[i].kind, static_cast<uint64_t>(RunOutcome::Kind::kDone));
      EXPECT_EQ(got[i].value, std::string(200, 'v'));
    }
  }
}

TEST(WorkerObjects, AValueFramedFromItsBoxIsTheSameAnswerAsThePlainEncoding) {
  const std::string bytes(300000, 'v');
  detail::EncodedValue kept(bytes);             // a result a worker keeps: copied once, into the frame
  detail::TypedBox<std::string> typed("seven");  // any other value: encoded, then framed
  for (const detail::ValueBox* box : {static_cast<const detail::ValueBox*>(&kept),
                                      static_cast<const detail::ValueBox*>(&typed)}) {
    std::string value;
    box->EncodeTo(value);
    const std::string framed = EncodeFetchedBox(42, *box);
    EXPECT_EQ(framed, Encode(Fetched{.request = 42, .value = value}));
    absl::StatusOr<FetchedView> view = DecodeFetchedView(framed);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->request, 42u);
    EXPECT_FALSE(view->pending);
    EXPECT_EQ(view->code, 0);
    EXPECT_EQ(view->value, value);
  }
  // A failure's answer reads back through the view too; a truncated one is refused.
  const std::string failed = Encode(Fetched{.request = 7, .code = 5, .message = "gone"});
  absl::StatusOr<FetchedView> view = DecodeFetchedView(failed);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->code, 5);
  EXPECT_EQ(view->message, "gone");
  EXPECT_TRUE(view->value.empty());
  const std::string framed = EncodeFetchedBox(1, kept);
  EXPECT_EQ(DecodeFetchedView(std::string_view(framed).substr(0, framed.size() - 1)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeFetchedView(Encode(Release{.object = 1, .count = 1})).status().code(), absl::StatusCode::kDataLoss);
}

TEST(WorkerObjects, HoldsBorrowsAndIdRangesSurviveTheWire) {
  absl::StatusOr<Release> release = DecodeRelease(Encode(Release{.object = kWorkerIdBase + 5, .count = 3}));
  ASSERT_TRUE(release.ok()) << release.status();
  EXPECT_EQ(release->object, kWorkerIdBase + 5);
  EXPECT_EQ(release->count, 3u);
  absl::StatusOr<Borrow> borrow = DecodeBorrow(Encode(Borrow{.object = 99}));
  ASSERT_TRUE(borrow.ok()) << borrow.status();
  EXPECT_EQ(borrow->object, 99u);
  std::vector<Outcome> outcomes = {Outcome{.id = 1, .held = kWorkerIdBase + kWorkerIdSpan + 1}};
  absl::StatusOr<std::vector<Outcome>> back = DecodeOutcomes(Encode(outcomes));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)[0].held, kWorkerIdBase + kWorkerIdSpan + 1);
  absl::StatusOr<Welcome> welcome = DecodeWelcome(Encode(Welcome{.object_id_base = kWorkerIdBase + kWorkerIdSpan}));
  ASSERT_TRUE(welcome.ok()) << welcome.status();
  EXPECT_EQ(welcome->object_id_base, kWorkerIdBase + kWorkerIdSpan);
  // The ranges: the driver's ids are below every worker's, the workers' below the next rank's.
  EXPECT_FALSE(IsWorkerObjectId(1));
  EXPECT_FALSE(IsWorkerObjectId(kWorkerIdBase - 1));
  EXPECT_TRUE(IsWorkerObjectId(kWorkerIdBase + kWorkerIdSpan));
  EXPECT_FALSE(IsWorkerObjectId(uint64_t{1} << 62));  // an mpirun rank's
}

TEST(WorkerProtocol, AHelloOrWelcomeSaysItsProtocolFirstWhateverFollows) {
  // Another build's Hello: its protocol reads the same, whatever the rest of it means there.
  Hello other{.protocol = 99, .nonce = "s", .job = "j", .node = "n", .pid = 7};
  absl::StatusOr<uint64_t> protocol = ProtocolOf(Encode(other));
  ASSERT_TRUE(protocol.ok()) << protocol.status();
  EXPECT_EQ(*protocol, 99u);
  std::string truncated = Encode(other).substr(0, 12);  // the protocol, then half the rest
  EXPECT_EQ(ProtocolOf(truncated).value_or(0), 99u);
  EXPECT_EQ(ProtocolOf(Encode(Welcome{.refusal = "no"})).value_or(0), kProtocol);
  EXPECT_FALSE(ProtocolOf("").ok());
  absl::StatusOr<Hello> ours = DecodeHello(Encode(Hello{.nonce = "s", .job = "j", .node = "n", .pid = 7}));
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_EQ(ours->protocol, kProtocol);
  EXPECT_EQ(ours->nonce, "s");
}

}  // namespace
}  // namespace gpupool::runtime::wire
