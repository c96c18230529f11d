#include "runtime/client/callback_thread.h"

#include <utility>

namespace gpupool::runtime {

CallbackThread::CallbackThread() : thread_([this] { Loop(); }) {}

CallbackThread::~CallbackThread() { Stop(); }

void CallbackThread::Post(std::function<void()> f) {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    queue_.push_back(std::move(f));
  }
  cv_.NotifyOne();
}

void CallbackThread::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void CallbackThread::Loop() {
  MutexLock lock(&mu_);
  while (true) {
    cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::function<void()> f = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    f();
    lock.Lock();
  }
}

}  // namespace gpupool::runtime
