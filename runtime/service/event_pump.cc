#include "runtime/service/event_pump.h"

#include <cstdio>
#include <utility>

namespace gpupool::runtime {

EventPump::~EventPump() noexcept {}

void EventPump::Push(PoolEvent e) {
  MutexLock lock(&mu_);
  if (closed_) return;
  queue_.push_back(std::move(e));
  if (wake_) {
    wake_->fulfill();
    wake_ = nullptr;
  }
}

kj::Promise<void> EventPump::Run() {
  kj::Maybe<kj::Promise<void>> wait;
  {
    MutexLock lock(&mu_);
    if (queue_.empty()) {
      auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
      wake_ = kj::mv(paf.fulfiller);
      wait = kj::mv(paf.promise);
    }
  }
  KJ_IF_MAYBE(w, wait) {
    return w->then([this] { return Run(); });
  }
  HandleQueued();
  return kj::evalLater([this] { return Run(); });
}

void EventPump::HandleQueued() {
  std::deque<PoolEvent> batch;
  {
    MutexLock lock(&mu_);
    batch.swap(queue_);
  }
  for (PoolEvent& e : batch) handle_(e);
}

void EventPump::ScheduleSoon() {
  loop_.AssertOnThread();
  if (cycle_soon_) return;
  cycle_soon_ = true;
  // Detached: a cycle still waiting when the loop stops is dropped with it.
  kj::evalLast([this] {
    loop_.AssertOnThread();
    cycle_soon_ = false;
    pool_.ScheduleNow();  // its listener calls queue events (Push) on this thread
    HandleQueued();
  }).detach([](kj::Exception&& e) {
    std::fprintf(stderr, "gpupool head: scheduling cycle failed: %s\n", e.getDescription().cStr());
  });
}

void EventPump::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  queue_.clear();
  wake_ = nullptr;
}

}  // namespace gpupool::runtime
