#include "runtime/tasks/shape_queue.h"

namespace gpupool::runtime {

void ShapeQueue::Push(Task* task) {
  task->next = nullptr;
  bool wake;
  {
    MutexLock lock(&mu_);
    if (tail_ == nullptr) {
      head_ = tail_ = task;
    } else {
      tail_->next = task;
      tail_ = task;
    }
    size_.fetch_add(1, std::memory_order_relaxed);
    wake = idle_ > 0;
  }
  if (wake) cv_.NotifyOne();
}

size_t ShapeQueue::PopBatch(Task** out, size_t max, std::chrono::steady_clock::time_point deadline,
                            const std::atomic<bool>& stop) {
  MutexLock lock(&mu_);
  while (head_ == nullptr) {
    if (stop.load(std::memory_order_relaxed)) return 0;
    ++idle_;
    bool timed_out = cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout;
    --idle_;
    if (timed_out && head_ == nullptr) return 0;
  }
  if (stop.load(std::memory_order_relaxed)) {
    // A stopped lease (revoked, lost) takes nothing more: the task goes to another waiter, or to
    // the lease its leaving thread asks for (a push counted this waiter as idle).
    if (idle_ > 0) cv_.NotifyOne();
    return 0;
  }
  size_t n = 0;
  while (head_ != nullptr && n < max) {
    out[n++] = head_;
    head_ = head_->next;
  }
  if (head_ == nullptr) tail_ = nullptr;
  size_.fetch_sub(n, std::memory_order_relaxed);
  return n;
}

void ShapeQueue::WakeAll() {
  { MutexLock lock(&mu_); }
  cv_.NotifyAll();
}

std::vector<Task*> ShapeQueue::TakeAll() {
  std::vector<Task*> all;
  MutexLock lock(&mu_);
  for (Task* t = head_; t != nullptr; t = t->next) all.push_back(t);
  head_ = tail_ = nullptr;
  size_.store(0, std::memory_order_relaxed);
  return all;
}

}  // namespace gpupool::runtime
