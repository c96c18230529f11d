// File: runtime/sync/mutex.h
//
// A mutex and condition variable whose locking clang checks (-Wthread-safety): `Mutex` wraps
// std::mutex with the capability attributes, as LevelDB's port::Mutex does, so fields can say
// `ABSL_GUARDED_BY(mu_)` and functions `ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)`, and a build with
// clang refuses code that touches guarded state without the lock. std::mutex underneath keeps
// ThreadSanitizer's view exact (Debian's abseil is not instrumented).
//
//   Mutex mu_;
//   int count_ ABSL_GUARDED_BY(mu_) = 0;
//   CondVar changed_;
//
//   void Add() {
//     MutexLock lock(&mu_);
//     ++count_;
//     changed_.NotifyAll();
//   }
//   void WaitForSome() {
//     MutexLock lock(&mu_);
//     changed_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ > 0; });
//   }
//
// State confined to one thread instead (an event loop's) says so with ThreadConfined, a
// capability of its own that only that thread holds.
#ifndef GPUPOOL_RUNTIME_SYNC_MUTEX_H_
#define GPUPOOL_RUNTIME_SYNC_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace gpupool::runtime {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis (and nothing at run time) that the caller holds the lock, where it cannot
  // see it: a callback run under a lock its caller took.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope; Unlock/Lock drop and retake it inside the scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() ABSL_UNLOCK_FUNCTION() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable over a Mutex the caller holds (std::condition_variable underneath).
class CondVar {
 public:
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, ready);
    lock.release();
  }
  // Returns ready() when the wait ends (false: timed out with it still false).
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout, Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool result = cv_.wait_for(lock, timeout, ready);
    lock.release();
    return result;
  }
  // Returns std::cv_status::timeout when `deadline` passed (spurious wake-ups return too).
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    std::cv_status result = cv_.wait_until(lock, deadline);
    lock.release();
    return result;
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline, Predicate ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    bool result = cv_.wait_until(lock, deadline, ready);
    lock.release();
    return result;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A reader/writer lock (std::shared_mutex underneath): ReaderMutexLock shares it, WriterMutexLock
// holds it alone.
class ABSL_LOCKABLE SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex* const mu_;
};

// A capability held by one thread only (an event loop's): state only that thread touches is
// ABSL_GUARDED_BY it, and code on that thread says so with ABSL_EXCLUSIVE_LOCKS_REQUIRED or
// `confined.AssertOnThread()` where it starts running (the analysis cannot follow a thread hop).
class ABSL_LOCKABLE ThreadConfined {
 public:
  void AssertOnThread() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_SYNC_MUTEX_H_
