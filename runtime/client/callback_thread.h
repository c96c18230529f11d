// File: runtime/client/callback_thread.h
//
// One thread that runs closures one at a time, in the order they were posted: how RemotePool
// calls its job's listeners, so that a listener hears about a lease in the order things happened
// to it and may call back into RemotePool (which takes locks of its own) from its callback.
//
//   CallbackThread callbacks;
//   callbacks.Post([listener, id] { listener->OnLost(id, why); });
//   callbacks.Stop();   // drops what is queued, waits for the closure running now
//
// Thread-safe: Post from any thread, including from a posted closure; a closure posted after
// another one (from the same thread, or ordered after it by a lock) runs after it. Post takes only
// this class's lock, never waits for a closure, and closures run without it. Stop (and the
// destructor) not from a posted closure. (Before RemotePool was split, this queue shared
// RemotePool's lock; nothing posts while holding that lock, so the order is the same.)
#ifndef GPUPOOL_RUNTIME_CLIENT_CALLBACK_THREAD_H_
#define GPUPOOL_RUNTIME_CLIENT_CALLBACK_THREAD_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

class CallbackThread {
 public:
  CallbackThread();   // starts the thread
  ~CallbackThread();  // Stop
  CallbackThread(const CallbackThread&) = delete;
  CallbackThread& operator=(const CallbackThread&) = delete;

  // Queues `f` to run on the thread after everything posted before it; dropped after Stop.
  void Post(std::function<void()> f);
  // Drops the closures not run yet and joins the thread (after the one running now returns).
  // Idempotent; nothing runs after it.
  void Stop();

 private:
  void Loop();  // the thread

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_CLIENT_CALLBACK_THREAD_H_
