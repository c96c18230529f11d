// The in-process pool service (runtime/service/pool_service.h): who runs the scheduling cycle and
// in which order listeners hear of its decisions.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/service/pool_service.h"
#include "tests/runtime/lease_recorder.h"
#include "tests/runtime/owner_borrower_config.h"

namespace gpupool::runtime {
namespace {

std::unique_ptr<PoolService> StartPool(const std::string& gpus) {
  PoolServiceOptions o;
  o.pool.simulate = gpus;
  auto pool = PoolService::Start(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

pool::LeaseRequest Req(const std::string& id, const std::string& team = "default") {
  pool::LeaseRequest r;
  r.id = id;
  r.team = team;
  return r;
}

// The pool service's event loop runs the cycle itself: after OwnerSchedules, a request waits for
// ScheduleNow (or the pool thread's next tick), and ScheduleNow has made the listener calls of
// its decisions, on the calling thread, by the time it returns.
TEST(PoolService, AnOwnerThatSchedulesHearsTheDecisionsOnItsOwnThread) {
  struct ThreadRecorder : Recorder {
    void OnGranted(const pool::Lease& lease) override {
      on = std::this_thread::get_id();
      Recorder::OnGranted(lease);
    }
    std::thread::id on;
  };
  std::unique_ptr<ThreadRecorder> a_heard, b_heard;  // outlive the pool
  std::unique_ptr<PoolService> pool;
  // The pool's own thread still ticks every 200 ms and runs a cycle then; on a machine so loaded
  // that a tick falls between the requests and ScheduleNow (the grants are then heard on the
  // pool's thread, rightly), start again on a fresh pool.
  bool owner_decided = false;
  for (int attempt = 0; attempt < 5 && !owner_decided; ++attempt) {
    pool.reset();
    a_heard = std::make_unique<ThreadRecorder>();
    b_heard = std::make_unique<ThreadRecorder>();
    pool = StartPool("2xH100-80GB");
    ASSERT_NE(pool, nullptr);
    pool->OwnerSchedules();
    absl::Status st = pool->Request(Req("a"), a_heard.get());
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(pool->Request(Req("b"), b_heard.get()).ok());
    if (pool->pending_requests() != 2) continue;
    pool->ScheduleNow();
    ASSERT_TRUE(a_heard->WaitFor("granted"));
    ASSERT_TRUE(b_heard->WaitFor("granted"));
    owner_decided = a_heard->on == std::this_thread::get_id();
  }
  ThreadRecorder& a = *a_heard;
  ThreadRecorder& b = *b_heard;
  ASSERT_TRUE(owner_decided) << "a tick of the pool's thread beat ScheduleNow five times";
  ASSERT_EQ(a.events().size(), 1u);
  ASSERT_EQ(b.events().size(), 1u);
  EXPECT_EQ(b.on, std::this_thread::get_id());  // both decided in the owner's one cycle
  EXPECT_EQ(pool->pending_requests(), 0u);

  // Nothing changed since: another ScheduleNow decides nothing and calls nobody.
  pool->ScheduleNow();
  EXPECT_EQ(a.events().size(), 1u);

  // A change the owner does not follow with ScheduleNow is still picked up by the pool's thread.
  Recorder c;
  ASSERT_TRUE(pool->Release(a.last_lease().id).ok());
  ASSERT_TRUE(pool->Request(Req("c"), &c).ok());
  ASSERT_TRUE(c.WaitFor("granted"));
  pool.reset();  // before the recorders it calls
}

// Listener calls come in the order the pool decided them, even when cycles run on two threads
// at once: a lease's revocation never overtakes its grant. Many rounds of grant, reclaim and
// release, each cycle raced between the pool's thread, this one and a third.
TEST(PoolService, ListenersHearDecisionsInOrderWhicheverThreadRanTheCycle) {
  PoolServiceOptions o;
  o.pool.simulate = "1xH100-80GB";
  o.clock_speed = 1000;  // the pool's thread ticks every millisecond
  o.config_text = kOwnerBorrowerConfig;
  auto started = PoolService::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  PoolService& pool = **started;
  pool.OwnerSchedules();
  std::atomic<bool> done{false};
  std::thread racer([&] {  // a second thread running cycles as fast as it can
    while (!done.load()) pool.ScheduleNow();
  });
  for (int round = 0; round < 500; ++round) {
    Recorder borrower, owner;
    pool::LeaseRequest b = Req("b" + std::to_string(round), "borrower");
    ASSERT_TRUE(pool.Request(b, &borrower).ok());
    pool.ScheduleNow();
    pool::LeaseRequest w = Req("o" + std::to_string(round), "owner");
    ASSERT_TRUE(pool.Request(w, &owner).ok());  // reclaims the borrowed GPU
    pool.ScheduleNow();
    ASSERT_TRUE(borrower.WaitFor("revoked")) << "round " << round;
    std::vector<std::string> heard = borrower.events();
    ASSERT_GE(heard.size(), 2u);
    EXPECT_EQ(heard[0].rfind("granted", 0), 0u) << "round " << round << ": " << heard[0];
    EXPECT_EQ(heard[1].rfind("revoked", 0), 0u) << "round " << round << ": " << heard[1];
    ASSERT_TRUE(pool.Release(borrower.last_lease().id).ok());
    pool.ScheduleNow();
    ASSERT_TRUE(owner.WaitFor("granted")) << "round " << round;
    ASSERT_TRUE(pool.Release(owner.last_lease().id).ok());
    pool.ScheduleNow();
  }
  done = true;
  racer.join();
}

}  // namespace
}  // namespace gpupool::runtime
