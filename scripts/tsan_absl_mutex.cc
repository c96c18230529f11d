// File: scripts/tsan_absl_mutex.cc
//
// Makes Debian's absl::Mutex visible to ThreadSanitizer. Not part of the product: build-tsan.sh
// builds it into build-tsan/libtsan_absl_mutex.so, and the TSan runs LD_PRELOAD it.
//
// Debian's libabsl_synchronization is compiled without -fsanitize=thread, so its futex-based
// absl::Mutex and absl::CondVar establish no happens-before edge TSan can see: every field that
// is ABSL_GUARDED_BY an absl::Mutex (checkpoint/, transport/, the head's journal) is reported as
// a race. Suppressing those would hide the real races in the same code, so instead each call
// that takes or gives up the mutex is interposed (the preloaded definitions win over the shared
// library's), forwarded to the real one (dlsym RTLD_NEXT) and annotated: a release on the
// mutex's address before it is given up, an acquire after it is taken. Readers are treated as
// writers (a slightly stronger order than a reader lock gives; no false report can come of it).
// absl::Condition::Eval runs inside the library, sometimes on the thread that unlocks, before the
// waiter's acquire is annotated: its reads are ignored (the condition functions are not checked).
//
//   bash scripts/build-tsan.sh
//   LD_PRELOAD=$PWD/build-tsan/libtsan_absl_mutex.so TSAN_OPTIONS=... build-tsan/tests/...
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
}

namespace {

// The real definition of `mangled` in the shared library; aborts if there is none.
template <typename Fn>
Fn Real(const char* mangled) {
  void* fn = dlsym(RTLD_NEXT, mangled);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found in libabsl_synchronization\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

#define REAL(type, mangled) static const auto real = Real<type>(mangled)

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
       "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool met = real(this, cond, timeout);
  __tsan_acquire(this);  // held either way
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Time),
       "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

// Await*: entered and left holding the mutex, which it gives up while it waits.
void Mutex::Await(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Duration),
       "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Time),
       "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

bool Condition::Eval() const {
  REAL(bool (*)(const Condition*), "_ZNK4absl7debian39Condition4EvalEv");
  __tsan_ignore_thread_begin();
  bool met = real(this);
  __tsan_ignore_thread_end();
  return met;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, absl::Duration),
       "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, absl::Time),
       "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl
