#include "runtime/client/callback_thread.h"

#include <utility>

namespace gpupool::runtime {

CallbackThread::CallbackThread() : thread_([this] { Loop(); }) {}

CallbackThread::~CallbackThread() { Stop(); }

void CallbackThread::Post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    queue_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void CallbackThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CallbackThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    std::function<void()> f = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    f();
    lock.lock();
  }
}

}  // namespace gpupool::runtime
