// File: runtime/tasks/driver_imports.h
//
// A worker's copies of its driver's objects (the driver's side is runtime/tasks/remote_objects.h).
// A ref to one of the driver's objects that reaches a worker (nested in a task's arguments, inside
// another such value, a function's export) becomes an entry of the worker's store under the
// driver's id, pending and marked remote. Nothing travels until something here needs the value
// (a Get, a wait, a task depending on it: ObjectStore's RemoteValues calls); then the worker asks
// its driver (wire::Fetch) and the answer completes the entry. The driver answers once the object
// is resolved, so a ref to a result still being computed is simply waited for; or, for a result
// another worker keeps, says where it is (wire::FetchFrom): the worker gets it from that worker
// (or reads its own copy), and asks the driver again for the value only when that fails.
//
// Borrowing (Ray's borrower protocol, reduced to one owner): when the worker first holds a ref to
// one of the driver's objects it tells the driver (wire::Borrow), and the driver keeps the object
// alive until the worker's entry is freed (wire::Release). So a ref a worker kept from an earlier
// task, in a global or a cache, still names a live object when it is read or returned later.
// Up to kKeptIdle imports nothing here holds are kept a while, so refs passed to task after task
// are fetched once.
//
// Thread-safety: thread-safe. OnFetched runs on the worker's serving thread, or on TaskInputs'
// completion thread for bytes got from another worker (a user's codec then runs there); the rest
// on any thread. mu_ is never held while sending, decoding, resolving or releasing an entry.
#ifndef GPUPOOL_RUNTIME_TASKS_DRIVER_IMPORTS_H_
#define GPUPOOL_RUNTIME_TASKS_DRIVER_IMPORTS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/objects/object_store.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/worker_protocol.h"

namespace gpupool::runtime {

class DriverImports final : public RemoteValues {
 public:
  // `resolved`: a task that waited for an entry this resolved (Executor::DependencyResolved).
  DriverImports(ObjectStore* store, FrameSocket* driver, std::function<void(Task*, ObjectEntry*)> resolved)
      : store_(*store), driver_(driver), resolved_(std::move(resolved)) {}

  // The driver's object `id`, retained for the caller: the worker's live copy, or a new pending
  // entry read with `decode` once fetched. After Stop, a new one is failed (kCancelled).
  detail::ObjectHeader* Import(ObjectId id, detail::BoxDecoder decode) ABSL_LOCKS_EXCLUDED(mu_);
  // The driver's answer to a Fetch.
  void OnFetched(const wire::FetchedView& answer) ABSL_LOCKS_EXCLUDED(mu_);
  // The driver's other answer: another worker keeps it (or this one), get it from there; when
  // that fails, the driver is asked again, to answer with the value (Fetch::through_driver).
  void OnFetchFrom(const wire::FetchFrom& where) ABSL_LOCKS_EXCLUDED(mu_);

  // How this worker reads a result it keeps (retained, or null), and gets one another worker
  // keeps (runtime/tasks/task_inputs.h's FromKeeper). Set once, before anything is served.
  using FromKeeper = std::function<void(const wire::InputAt&, absl::AnyInvocable<void(absl::StatusOr<std::string>)>)>;
  void UseKeepers(std::function<detail::ObjectHeader*(uint64_t)> kept, FromKeeper from_keeper) {
    kept_result_ = std::move(kept);
    from_keeper_ = std::move(from_keeper);
  }
  // The worker stops serving: entries still waiting for their values fail with `why`, nothing
  // more is sent, and the idle copies are let go.
  void Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // Lets go of the kept copies nothing else holds (the worker is idle: their borrows should not
  // pin the driver's objects while it lingers).
  void DropIdle() ABSL_LOCKS_EXCLUDED(mu_);

  // RemoteValues.
  void Want(ObjectEntry* entry) override ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(ObjectEntry* entry) override ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr size_t kKeptIdle = 64;

 private:
  struct Record {
    detail::BoxDecoder decode = nullptr;
    bool asked = false;
  };
  void Send(const std::string& frame) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the driver for `id` again, to answer with its value.
  void AskThroughDriver(ObjectId id) ABSL_LOCKS_EXCLUDED(mu_);
  void Resolve(ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure);

  ObjectStore& store_;
  FrameSocket* const driver_;
  const std::function<void(Task*, ObjectEntry*)> resolved_;
  std::function<detail::ObjectHeader*(uint64_t)> kept_result_;  // UseKeepers
  FromKeeper from_keeper_;
  Mutex mu_;
  Mutex send_mu_;  // serialises sends with Stop: nothing is sent once it returned
  bool stopped_ ABSL_GUARDED_BY(send_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Pending imports, by id (an id names one live entry; Forget checks it is the same one).
  absl::flat_hash_map<ObjectId, std::pair<ObjectEntry*, Record>> waiting_ ABSL_GUARDED_BY(mu_);
  std::deque<ObjectEntry*> kept_ ABSL_GUARDED_BY(mu_);                     // retained, newest last
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_DRIVER_IMPORTS_H_
