// The driver's record of objects its workers keep (runtime/tasks/remote_objects.h), against a real
// loopback connection whose worker end the test plays: what is fetched when, that an answer meets
// the record that asked for it (never a newer entry's for the same object), that holds go back
// exactly once however an entry ends, that a worker's loss fails what only it kept by name, and
// that the driver keeps what a worker borrows until it lets go, and that a kept result's task
// lives as its lineage until the result is read, dropped or made again.
#include "runtime/tasks/remote_objects.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpupool/codec.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/tasks/task.h"
#include "tests/runtime/loopback_frame_sockets.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kBase = wire::kWorkerIdBase + wire::kWorkerIdSpan;  // the test worker's range

class RemoteObjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LoopbackFrameSockets ends = ConnectOverLoopback();
    ASSERT_TRUE(ends.client != nullptr && ends.server != nullptr);
    worker_end_ = std::move(ends.server);
    worker_ = std::make_shared<WorkerConnection>("node-1", 42, kBase, std::move(ends.client));
    store_ = std::make_unique<ObjectStore>();
    objects_ = std::make_shared<RemoteObjects>(store_.get(), [](Task*, ObjectEntry*) {});
    store_->SetRemoteValues(objects_);
  }
  void TearDown() override {
    store_->SetRemoteValues(nullptr);
    ObjectStore::Orphan(std::move(store_));
  }

  // A ref to the worker's object `id`, met while decoding what the worker sent.
  detail::ObjectHeader* ImportFromWorker(ObjectId id) {
    RemoteObjects::DecodingFrom scope(worker_.get());
    return objects_->Import(id, &detail::DecodeBox<int>);
  }
  // The failure a lost value's read raises: its code must be kDataLoss; its message, returned.
  static std::string LostWhy(detail::ObjectHeader* h) {
    try {
      (void)detail::AwaitValue(h, std::chrono::steady_clock::now());
      ADD_FAILURE() << "a lost value was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
      return e.what();
    }
    return "";
  }
  // What the driver sent the worker next, decoded as the kind expected.
  template <typename M>
  M Next(absl::StatusOr<M> (*decode)(std::string_view)) {
    absl::StatusOr<std::string> frame = worker_end_->Receive(std::chrono::seconds(5));
    EXPECT_TRUE(frame.ok()) << frame.status();
    absl::StatusOr<M> message = decode(frame.ok() ? *frame : "");
    EXPECT_TRUE(message.ok()) << message.status();
    return message.ok() ? *message : M{};
  }
  wire::Fetch NextFetch() { return Next(&wire::DecodeFetch); }
  wire::Release NextRelease() { return Next(&wire::DecodeRelease); }
  bool NothingSent() { return worker_end_->Receive(std::chrono::milliseconds(100)).status().code() ==
                              absl::StatusCode::kDeadlineExceeded; }
  // The worker answers `request` with the value `v`.
  void Answer(uint64_t request, int v) {
    std::string value;
    {
      Writer w(value);
      gpupool::Encode(w, v);
    }
    const std::string frame = wire::Encode(wire::Fetched{.request = request, .value = value});
    absl::StatusOr<wire::FetchedView> view = wire::DecodeFetchedView(frame);
    ASSERT_TRUE(view.ok()) << view.status();
    objects_->OnFetched(*worker_, *view);
  }

  std::unique_ptr<FrameSocket> worker_end_;
  std::shared_ptr<WorkerConnection> worker_;
  std::unique_ptr<ObjectStore> store_;
  std::shared_ptr<RemoteObjects> objects_;
};

TEST_F(RemoteObjectsTest, NothingIsFetchedUntilNeededAndTheHoldsGoBackOnceRead) {
  detail::ObjectHeader* x = ImportFromWorker(kBase + 1);
  detail::ObjectHeader* again = ImportFromWorker(kBase + 1);  // a second ref in what was decoded
  EXPECT_EQ(x, again);
  EXPECT_EQ(x->state.load(), detail::kObjectPending);
  EXPECT_EQ(objects_->held(), 1u);
  EXPECT_TRUE(NothingSent());
  store_->Want(static_cast<ObjectEntry*>(x));
  store_->Want(static_cast<ObjectEntry*>(x));  // asked once
  wire::Fetch fetch = NextFetch();
  EXPECT_EQ(fetch.object, kBase + 1);
  EXPECT_TRUE(NothingSent());
  Answer(fetch.request, 7);
  EXPECT_EQ(detail::ValueAs<int>(x->id, detail::AwaitValue(x, std::chrono::steady_clock::now())), 7);
  wire::Release release = NextRelease();
  EXPECT_EQ(release.object, kBase + 1);
  EXPECT_EQ(release.count, 2u);  // both refs' holds
  EXPECT_TRUE(release.read);
  EXPECT_EQ(objects_->held(), 0u);
  // A ref met after the driver has the value: its hold goes back at once.
  detail::ObjectHeader* third = ImportFromWorker(kBase + 1);
  EXPECT_EQ(third, x);
  EXPECT_EQ(NextRelease().count, 1u);
  for (detail::ObjectHeader* h : {x, again, third}) detail::Release(h);
  EXPECT_TRUE(NothingSent());
}

TEST_F(RemoteObjectsTest, AnAnswerMeetsTheRecordThatAskedAndAFreedEntrysHoldsStillGoBack) {
  // Asked, then freed before the answer: its record waits for the answer as an orphan.
  detail::ObjectHeader* first = ImportFromWorker(kBase + 5);
  store_->Want(static_cast<ObjectEntry*>(first));
  wire::Fetch asked = NextFetch();
  detail::Release(first);
  EXPECT_TRUE(NothingSent());  // its hold goes back with the answer, not before
  // The same object met again: a new entry, not asked yet.
  detail::ObjectHeader* second = ImportFromWorker(kBase + 5);
  // The first Fetch's answer is read for the orphan (its hold goes back), and leaves the new
  // entry alone: before requests were the record's own, it completed the new entry instead, and
  // the orphan's hold stayed with the worker for good.
  Answer(asked.request, 11);
  EXPECT_EQ(second->state.load(), detail::kObjectPending);
  wire::Release orphans = NextRelease();
  EXPECT_EQ(orphans.object, kBase + 5);
  EXPECT_EQ(orphans.count, 1u);
  EXPECT_EQ(objects_->held(), 1u);
  // The new entry asks for itself, with a request of its own.
  store_->Want(static_cast<ObjectEntry*>(second));
  wire::Fetch mine = NextFetch();
  EXPECT_NE(mine.request, asked.request);
  Answer(asked.request, 99);  // a stray repeat of the old answer is ignored
  EXPECT_EQ(second->state.load(), detail::kObjectPending);
  Answer(mine.request, 12);
  EXPECT_EQ(detail::ValueAs<int>(second->id, detail::AwaitValue(second, std::chrono::steady_clock::now())), 12);
  EXPECT_EQ(NextRelease().count, 1u);
  detail::Release(second);
  EXPECT_TRUE(NothingSent());
}

TEST_F(RemoteObjectsTest, AnEntryDroppedUnaskedGivesItsHoldsBackAndALostWorkerFailsWhatOnlyItKept) {
  detail::ObjectHeader* dropped = ImportFromWorker(kBase + 7);
  detail::ObjectHeader* kept = ImportFromWorker(kBase + 8);
  detail::Release(dropped);
  wire::Release release = NextRelease();
  EXPECT_EQ(release.object, kBase + 7);
  EXPECT_EQ(release.count, 1u);
  objects_->OnLost(*worker_, absl::UnavailableError("killed"));
  EXPECT_EQ(objects_->held(), 0u);
  const std::string why = LostWhy(kept);
  EXPECT_THAT(why, HasSubstr("is lost: only worker pid 42 on node node-1 kept it"));
  EXPECT_THAT(why, HasSubstr("killed"));
  detail::Release(kept);
  // Met in a value read after the worker went (one fetched over UCX, read on another thread):
  // lost at once, never a record that nothing would settle.
  detail::ObjectHeader* late = ImportFromWorker(kBase + 10);
  EXPECT_EQ(late->state.load(), detail::kObjectFailed);
  EXPECT_EQ(objects_->held(), 0u);
  detail::Release(late);
  // An id of this worker's that nothing holds any more, met outside its frames: named, not guessed.
  try {
    (void)objects_->Import(kBase + 9, &detail::DecodeBox<int>);
    ADD_FAILURE() << "an unknown worker object was made up";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST_F(RemoteObjectsTest, AValueAWorkerSendsUnaskedSettlesWhatItKeptAndItsHoldsGoBack) {
  // The worker keeps object kBase + 20 for the driver, then sends its value with a task it
  // submits (wire::Submit's inline values): the entry completes, and the worker may let go.
  detail::ObjectHeader* x = ImportFromWorker(kBase + 20);
  std::string value;
  {
    Writer w(value);
    gpupool::Encode(w, 41);
  }
  EXPECT_FALSE(objects_->SettleFrom(static_cast<ObjectEntry*>(x), *worker_, "\xff")) << "an unreadable value";
  EXPECT_EQ(x->state.load(), detail::kObjectPending);
  EXPECT_EQ(objects_->held(), 1u) << "the record stays when the value does not read";
  EXPECT_TRUE(objects_->SettleFrom(static_cast<ObjectEntry*>(x), *worker_, value));
  EXPECT_EQ(detail::ValueAs<int>(x->id, detail::AwaitValue(x, std::chrono::steady_clock::now())), 41);
  wire::Release release = NextRelease();
  EXPECT_EQ(release.object, kBase + 20);
  EXPECT_EQ(release.count, 1u);
  EXPECT_TRUE(release.read);
  EXPECT_EQ(objects_->held(), 0u);
  // Its worker gone, the value it sent outlives it.
  objects_->OnLost(*worker_, absl::UnavailableError("killed"));
  EXPECT_EQ(detail::ValueAs<int>(x->id, detail::AwaitValue(x, std::chrono::steady_clock::now())), 41);
  // Nothing to settle: an entry this worker keeps nothing for.
  detail::ObjectHeader* mine = store_->CreatePending();
  EXPECT_FALSE(objects_->SettleFrom(static_cast<ObjectEntry*>(mine), *worker_, value));
  detail::Release(mine);
  detail::Release(x);
}

TEST_F(RemoteObjectsTest, WhatAWorkerBorrowsLivesUntilItLetsGoOrGoes) {
  detail::ObjectHeader* value = store_->CreateReady(std::make_unique<detail::TypedBox<int>>(3));
  const ObjectId id = value->id;
  objects_->Lend(*worker_, id);
  objects_->Lend(*worker_, id);
  detail::Release(value);  // the driver's own ref goes: the worker's borrows keep it
  EXPECT_TRUE(store_->Holds(id));
  objects_->Returned(*worker_, wire::Release{.object = id, .count = 1});
  EXPECT_TRUE(store_->Holds(id));
  objects_->Returned(*worker_, wire::Release{.object = id, .count = 1});
  EXPECT_FALSE(store_->Holds(id));
  // A borrow of what is gone keeps nothing; a worker that goes returns what it borrowed.
  objects_->Lend(*worker_, id);
  detail::ObjectHeader* other = store_->CreateReady(std::make_unique<detail::TypedBox<int>>(4));
  objects_->Lend(*worker_, other->id);
  const ObjectId other_id = other->id;
  detail::Release(other);
  EXPECT_TRUE(store_->Holds(other_id));
  objects_->OnLost(*worker_, absl::UnavailableError("gone"));
  EXPECT_FALSE(store_->Holds(other_id));
}

// A finished task whose result a worker keeps, with one input: what Executor::Finish offers as
// the result's lineage. Its result is not its own (the entry's references are the test's).
Task* FinishedTask(ObjectEntry* result, detail::ObjectHeader* input) {
  auto* task = new Task;
  task->id = 7;
  task->args = "arguments";
  task->result = result;
  detail::Retain(input);
  task->deps.push_back(input);
  return task;
}

TEST_F(RemoteObjectsTest, AKeptResultsTaskLivesAsItsLineageUntilReadDroppedOrMadeAgain) {
  std::vector<std::pair<Task*, ObjectEntry*>> asked_again;
  ObjectEntry* refuse = nullptr;  // the result whose task the executor will not run again
  auto objects = std::make_shared<RemoteObjects>(
      store_.get(), [](Task*, ObjectEntry*) {},
      [&](const std::vector<std::pair<Task*, ObjectEntry*>>& lost) {
        std::vector<absl::Status> answers;
        for (auto [task, result] : lost) {
          asked_again.emplace_back(task, result);
          answers.push_back(result == refuse ? absl::ResourceExhaustedError("no retry left") : absl::OkStatus());
        }
        return answers;
      });
  store_->SetRemoteValues(objects);
  detail::ObjectHeader* input = store_->CreateReady(std::make_unique<detail::TypedBox<int>>(1));
  const ObjectId input_id = input->id;
  auto hold = [&](uint64_t held) {
    ObjectEntry* result = store_->CreatePending();
    EXPECT_TRUE(objects->HoldResult(result, *worker_, held, &detail::DecodeBox<int>, "the result of task 'f' (id 7)"));
    Task* task = FinishedTask(result, input);
    EXPECT_TRUE(objects->KeepLineage(task));
    return result;
  };

  // Read: the driver has the value, so the task is let go, and with it its input.
  ObjectEntry* read = hold(kBase + 1);
  detail::Release(input);
  EXPECT_TRUE(store_->Holds(input_id));  // the lineage holds its input
  store_->Want(read);
  wire::Fetch fetch = NextFetch();
  std::string value;
  {
    Writer w(value);
    gpupool::Encode(w, 5);
  }
  const std::string frame = wire::Encode(wire::Fetched{.request = fetch.request, .value = value});
  absl::StatusOr<wire::FetchedView> view = wire::DecodeFetchedView(frame);
  ASSERT_TRUE(view.ok()) << view.status();
  objects->OnFetched(*worker_, *view);
  EXPECT_EQ(NextRelease().count, 1u);
  EXPECT_FALSE(store_->Holds(input_id));
  detail::Release(read);

  // Dropped unread: the same.
  input = store_->CreateReady(std::make_unique<detail::TypedBox<int>>(2));
  ObjectEntry* dropped = hold(kBase + 2);
  const ObjectId second_input = input->id;
  detail::Release(input);
  detail::Release(dropped);
  EXPECT_EQ(NextRelease().object, kBase + 2);
  EXPECT_FALSE(store_->Holds(second_input));

  // Lost with its worker: made again (the entry stays pending, held by the task from then on),
  // or, when the executor says no, failed saying why.
  input = store_->CreateReady(std::make_unique<detail::TypedBox<int>>(3));
  ObjectEntry* remade = hold(kBase + 3);
  ObjectEntry* refused = hold(kBase + 4);
  detail::Release(input);
  refuse = refused;
  objects->OnLost(*worker_, absl::UnavailableError("killed"));
  ASSERT_EQ(asked_again.size(), 2u);
  EXPECT_EQ(objects->rebuilt(), 1u);
  EXPECT_EQ(remade->state.load(), detail::kObjectPending);
  const std::string why = LostWhy(refused);
  EXPECT_THAT(why, HasSubstr("the result of task 'f' (id 7) is lost: only worker pid 42 on node node-1 kept it"));
  EXPECT_THAT(why, HasSubstr("killed; not made again: no retry left"));
  for (auto [task, result] : asked_again) {
    if (result == remade) {  // the executor's now: it would run it and settle its result
      DeleteTaskReleasingInputs(task);
      detail::Release(result);
    }
  }
  detail::Release(remade);
  detail::Release(refused);
  store_->SetRemoteValues(objects_);
}

}  // namespace
}  // namespace gpupool::runtime
