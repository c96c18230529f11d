// A worker's tasks' inputs that other workers keep (runtime/tasks/task_inputs.h), with real UCX
// endpoints on loopback (a keeper's ObjectServer, the worker's fetcher) and a real connection
// whose driver end the test plays: an input kept by this worker is read in place, one another
// worker keeps comes from it with nothing asked of the driver, one the keeper no longer has (or
// that has no keeper to reach) is asked of the driver, a failure names both routes, and stopping
// fails what still waits without sending anything more.
#include "runtime/tasks/task_inputs.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "runtime/tasks/driver_imports.h"
#include "runtime/rpc/frame_socket.h"
#include "tests/runtime/loopback_frame_sockets.h"

namespace gpupool::runtime {
namespace {

using ::testing::HasSubstr;

constexpr char kKey[] = "objects-key-0123456789";

class TaskInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LoopbackFrameSockets ends = ConnectOverLoopback();
    ASSERT_TRUE(ends.client != nullptr && ends.server != nullptr);
    worker_end_ = std::move(ends.client);
    driver_end_ = std::move(ends.server);
    auto keeper = transport::UcxWorker::Create({.transports = "tcp", .name = "the keeper"});
    ASSERT_TRUE(keeper.ok()) << keeper.status();
    keeper_ = *std::move(keeper);
    auto server = transport::ObjectServer::Start(*keeper_, registry_.AsLookup(), kKey);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto ucx = transport::UcxWorker::Create({.transports = "tcp", .name = "the worker"});
    ASSERT_TRUE(ucx.ok()) << ucx.status();
    ucx_ = *std::move(ucx);
    auto fetcher = transport::ObjectFetcher::Create(*ucx_, kKey);
    ASSERT_TRUE(fetcher.ok()) << fetcher.status();
    fetcher_ = *std::move(fetcher);
    store_ = std::make_unique<ObjectStore>();
    inputs_ = std::make_unique<TaskInputs>(
        store_.get(), worker_end_.get(),
        [this](uint64_t id) -> detail::ObjectHeader* {
          if (id != kept_id_ || kept_ == nullptr) return nullptr;
          detail::Retain(kept_);
          return kept_;
        },
        [this] { return TaskInputs::Ucx{ucx_.get(), fetcher_.get()}; });
  }
  void TearDown() override {
    if (inputs_ != nullptr) inputs_->Stop(absl::CancelledError("the test ends"));
    fetcher_.reset();
    inputs_.reset();
    detail::Release(kept_);
    server_.reset();
    for (const std::string& id : served_) (void)registry_.Remove(id);
    if (store_ != nullptr) ObjectStore::Orphan(std::move(store_));
  }

  // The keeper serves `bytes` as its kept result `id`.
  void Keep(uint64_t id, const std::string& bytes) {
    auto& stored = stored_.emplace_back(std::make_unique<std::string>(bytes));
    ASSERT_TRUE(registry_
                    .Add(std::to_string(id), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(stored->data()),
                                                                 stored->size()))
                    .ok());
    served_.push_back(std::to_string(id));
  }
  // The input's bytes, or its failure's message.
  static std::string Read(detail::ObjectHeader* input) {
    try {
      const detail::ValueBox& box =
          detail::AwaitValue(input, std::chrono::steady_clock::now() + std::chrono::seconds(10));
      EXPECT_EQ(box.type(), typeid(detail::EncodedValue));
      return static_cast<const detail::EncodedValue&>(box).bytes;
    } catch (const Error& e) {
      return std::string("failed: ") + e.what();
    }
  }
  // What the worker asked the driver next.
  wire::Fetch NextAsk() {
    absl::StatusOr<std::string> frame = driver_end_->Receive(std::chrono::seconds(5));
    EXPECT_TRUE(frame.ok()) << frame.status();
    absl::StatusOr<wire::Fetch> ask = wire::DecodeFetch(frame.ok() ? *frame : "");
    EXPECT_TRUE(ask.ok()) << ask.status();
    return ask.ok() ? *ask : wire::Fetch{};
  }
  bool NothingAsked() {
    return driver_end_->Receive(std::chrono::milliseconds(200)).status().code() == absl::StatusCode::kDeadlineExceeded;
  }
  void Answer(const wire::Fetched& answer) {
    const std::string frame = wire::Encode(answer);
    absl::StatusOr<wire::FetchedView> view = wire::DecodeFetchedView(frame);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_TRUE(inputs_->OnFetched(*view));
  }

  std::unique_ptr<FrameSocket> worker_end_;
  std::unique_ptr<FrameSocket> driver_end_;
  std::unique_ptr<transport::UcxWorker> keeper_;
  transport::ObjectRegistry registry_;
  std::vector<std::unique_ptr<std::string>> stored_;
  std::vector<std::string> served_;
  std::unique_ptr<transport::ObjectServer> server_;
  std::unique_ptr<transport::UcxWorker> ucx_;
  std::unique_ptr<transport::ObjectFetcher> fetcher_;
  std::unique_ptr<ObjectStore> store_;
  uint64_t kept_id_ = 0;
  detail::ObjectHeader* kept_ = nullptr;
  std::unique_ptr<TaskInputs> inputs_;
};

TEST_F(TaskInputsTest, AnInputKeptHereIsReadInPlaceAndOneAnotherWorkerKeepsComesFromIt) {
  kept_id_ = 5;
  kept_ = store_->CreateReady(std::make_unique<detail::EncodedValue>("kept here"));
  detail::ObjectHeader* here = inputs_->Input(wire::InputAt{.index = 0, .object = 100, .held = 5, .here = true});
  EXPECT_EQ(here, kept_) << "read in place, not copied";
  EXPECT_EQ(Read(here), "kept here");
  detail::Release(here);

  const std::string big(3 << 20, 'q');
  Keep(7, big);
  detail::ObjectHeader* there =
      inputs_->Input(wire::InputAt{.index = 1, .object = 101, .held = 7, .ucx_address = keeper_->address()});
  EXPECT_NE(there->id, 101u) << "an input is an entry of its own, not the driver's id";
  EXPECT_EQ(Read(there), big);
  detail::Release(there);
  // Its size told (Outcome::held_bytes), it lands straight in the input's own bytes.
  detail::ObjectHeader* sized = inputs_->Input(
      wire::InputAt{.index = 2, .object = 101, .held = 7, .ucx_address = keeper_->address(), .bytes = big.size()});
  EXPECT_EQ(Read(sized), big);
  detail::Release(sized);
  EXPECT_TRUE(NothingAsked()) << "the driver was asked for an input the workers had";
  EXPECT_EQ(server_->stats().served, 2u);
}

TEST_F(TaskInputsTest, WhatItsKeeperNoLongerHasIsAskedOfTheDriverAndAFailureNamesBothRoutes) {
  // The keeper let go of its bytes (the driver fetched them meanwhile): the driver answers.
  detail::ObjectHeader* gone =
      inputs_->Input(wire::InputAt{.index = 0, .object = 102, .held = 8, .ucx_address = keeper_->address()});
  wire::Fetch ask = NextAsk();
  EXPECT_EQ(ask.object, 102u);
  EXPECT_EQ(ask.request, gone->id);
  Answer(wire::Fetched{.request = ask.request, .value = "from the driver"});
  EXPECT_EQ(Read(gone), "from the driver");
  detail::Release(gone);

  // Said to be kept here, but no longer: asked of the driver, whose failure is the input's.
  detail::ObjectHeader* lost = inputs_->Input(wire::InputAt{.index = 0, .object = 103, .held = 9, .here = true});
  ask = NextAsk();
  EXPECT_EQ(ask.object, 103u);
  Answer(wire::Fetched{.request = ask.request, .code = static_cast<int64_t>(ErrorCode::kDataLoss),
                       .message = "object 103 is lost: only worker pid 7 kept it"});
  const std::string why = Read(lost);
  EXPECT_THAT(why, HasSubstr("input object 103 of the driver"));
  EXPECT_THAT(why, HasSubstr("not from the worker that kept it: this worker no longer keeps it"));
  EXPECT_THAT(why, HasSubstr("only worker pid 7 kept it"));
  EXPECT_EQ(lost->state.load(), detail::kObjectFailed);
  EXPECT_FALSE(static_cast<ObjectEntry*>(lost)->remade_at_driver.load());
  detail::Release(lost);

  // Being made again (its keeper died, its task runs again): the input fails marked so, and its
  // task goes back to the driver unrun (Executor::AwaitInputs) rather than wait holding its lease.
  detail::ObjectHeader* remade = inputs_->Input(wire::InputAt{.index = 0, .object = 105, .held = 10, .here = true});
  ask = NextAsk();
  EXPECT_TRUE(ask.for_input);
  Answer(wire::Fetched{.request = ask.request, .pending = true});
  EXPECT_THAT(Read(remade), HasSubstr("it is being made again"));
  EXPECT_TRUE(static_cast<ObjectEntry*>(remade)->remade_at_driver.load());
  detail::Release(remade);

  // No keeper to reach (it serves nothing over UCX): asked of the driver at once.
  detail::ObjectHeader* plain = inputs_->Input(wire::InputAt{.index = 0, .object = 104});
  ask = NextAsk();
  EXPECT_EQ(ask.object, 104u);
  // Its task dropped it before the answer came (the lease stopped): the ask still holds the
  // entry, so the answer lands in live memory and lets go of it.
  detail::Release(plain);
  Answer(wire::Fetched{.request = ask.request, .value = "late"});
  EXPECT_EQ(store_->Lookup(ask.request), nullptr) << "the entry outlived its last holder";
}

TEST_F(TaskInputsTest, StoppingFailsWhatStillWaitsAndAsksNothingMore) {
  detail::ObjectHeader* waiting = inputs_->Input(wire::InputAt{.index = 0, .object = 105});
  EXPECT_EQ(NextAsk().object, 105u);
  inputs_->Stop(absl::CancelledError("the worker is stopping"));
  EXPECT_THAT(Read(waiting), HasSubstr("input object 105 of the driver: the worker is stopping"));
  detail::Release(waiting);
  detail::ObjectHeader* after =
      inputs_->Input(wire::InputAt{.index = 0, .object = 106, .held = 7, .ucx_address = keeper_->address()});
  EXPECT_THAT(Read(after), HasSubstr("the worker is stopping"));
  detail::Release(after);
  EXPECT_TRUE(NothingAsked());
  EXPECT_EQ(server_->stats().served + server_->stats().not_found, 0u) << "nothing fetched after the stop";
}

// The driver's objects a worker imports (runtime/tasks/driver_imports.h) that another worker
// keeps: the driver says where (wire::FetchFrom), the worker gets them from there, and asks the
// driver again, for the value itself, only when that fails.
TEST_F(TaskInputsTest, AnImportTheDriverSaysAnotherWorkerKeepsComesFromItOrElseThroughTheDriver) {
  auto imports = std::make_shared<DriverImports>(store_.get(), worker_end_.get(), [](Task*, ObjectEntry*) {});
  imports->UseKeepers([](uint64_t) -> detail::ObjectHeader* { return nullptr; },  // keeps nothing itself
                      [this](const wire::InputAt& at, absl::AnyInvocable<void(absl::StatusOr<std::string>)> done) {
                        inputs_->FromKeeper(at, std::move(done));
                      });
  store_->SetRemoteValues(imports);
  auto encoded = [](const std::string& v) {
    std::string out;
    Writer w(out);
    gpupool::Encode(w, v);
    return out;
  };
  // What the worker sent the driver next, past its borrows.
  auto next_fetch = [this] {
    while (true) {
      absl::StatusOr<std::string> frame = driver_end_->Receive(std::chrono::seconds(5));
      if (!frame.ok()) return wire::Fetch{};
      if (wire::KindOf(*frame).value_or(wire::Kind::kBye) == wire::Kind::kBorrow) continue;
      return wire::DecodeFetch(*frame).value_or(wire::Fetch{});
    }
  };
  auto read = [](detail::ObjectHeader* h) {
    try {
      return detail::ValueAs<std::string>(
          h->id, detail::AwaitValue(h, std::chrono::steady_clock::now() + std::chrono::seconds(10)));
    } catch (const std::exception& e) {
      return std::string("failed: ") + e.what();
    }
  };

  const std::string value(1 << 20, 'k');
  Keep(11, encoded(value));
  detail::ObjectHeader* there = imports->Import(300, &detail::DecodeBox<std::string>);
  std::thread reader([&] { EXPECT_EQ(read(there), value); });
  wire::Fetch ask = next_fetch();
  EXPECT_EQ(ask.object, 300u);
  EXPECT_FALSE(ask.through_driver);
  imports->OnFetchFrom(wire::FetchFrom{
      .request = ask.request, .at = {.object = 300, .held = 11, .ucx_address = keeper_->address()}});
  reader.join();
  EXPECT_TRUE(NothingAsked()) << "asked the driver for what the keeper had";

  // Said to be kept here, but this worker no longer has it: asked again, for the value.
  detail::ObjectHeader* gone = imports->Import(301, &detail::DecodeBox<std::string>);
  std::thread second([&] { EXPECT_EQ(read(gone), "from the driver"); });
  ask = next_fetch();
  imports->OnFetchFrom(wire::FetchFrom{.request = ask.request, .at = {.object = 301, .held = 12, .here = true}});
  wire::Fetch again = next_fetch();
  EXPECT_EQ(again.object, 301u);
  EXPECT_TRUE(again.through_driver);
  const std::string frame = wire::Encode(wire::Fetched{.request = again.request, .value = encoded("from the driver")});
  imports->OnFetched(*wire::DecodeFetchedView(frame));
  second.join();

  // The keeper no longer serves it (the driver read it meanwhile): asked again, for the value.
  detail::ObjectHeader* let_go = imports->Import(302, &detail::DecodeBox<std::string>);
  std::thread third([&] { EXPECT_EQ(read(let_go), "read by the driver"); });
  ask = next_fetch();
  imports->OnFetchFrom(wire::FetchFrom{
      .request = ask.request, .at = {.object = 302, .held = 13, .ucx_address = keeper_->address()}});
  again = next_fetch();
  EXPECT_EQ(again.object, 302u);
  EXPECT_TRUE(again.through_driver);
  const std::string answer = wire::Encode(wire::Fetched{.request = again.request, .value = encoded("read by the driver")});
  imports->OnFetched(*wire::DecodeFetchedView(answer));
  third.join();

  imports->Stop(absl::CancelledError("the test ends"));
  detail::Release(there);
  detail::Release(gone);
  detail::Release(let_go);
  store_->SetRemoteValues(nullptr);
}

}  // namespace
}  // namespace gpupool::runtime
