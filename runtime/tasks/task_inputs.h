// File: runtime/tasks/task_inputs.h
//
// A worker's tasks' inputs that the driver did not send with them (wire::InputAt): values another
// worker of the job keeps (a result too big to go with its outcome), or this worker itself. The
// driver says where each lives; the worker gets it from there, so the bytes cross the network
// once, never through the driver (Ray's raylets pull task arguments from the node that has them):
//   - here: this worker keeps it; the task reads the kept bytes in place (no copy at all);
//   - at a UCX address: the keeper's ObjectServer (transport/object_transfer.h), fetched when the
//     task arrives, so the transfer overlaps the tasks queued before it on the lease;
//   - else, or when either of those fails (the keeper let go of the bytes because the driver
//     fetched them meanwhile, died, or cannot be reached over UCX): the driver is asked
//     (wire::Fetch under the input's id here), and it answers once it has the value, fetching it
//     from the keeper itself, or with why it cannot (the keeper died with it: kDataLoss by name),
//     or that it is being made again (the keeper died, and its task runs again): then the task
//     goes back to the driver unrun, to wait for it without holding its lease.
// Each input is an entry of this worker's store of its own (never the driver's id: a ref to the
// same object elsewhere in the worker reads it typed, an input reads it as bytes), pending until
// its bytes arrive; the task's argument reader waits for it (detail::AwaitValue). The driver keeps
// its own entry alive while the task is out, and with it the keeper's bytes.
//
// Thread-safety: thread-safe. OnFetched runs on the worker's serving thread; fetches from keepers
// end on a thread of this class's (completions_), never UCX's, so copying bytes or asking the
// driver never holds up UCX's other transfers (the keeper's own serving among them). The
// driver's objects imported from a keeper (DriverImports) are decoded on that thread too, so a
// slow codec there delays the other fetches' completions. mu_ is never held while sending,
// resolving or releasing an entry.
#ifndef GPUPOOL_RUNTIME_TASKS_TASK_INPUTS_H_
#define GPUPOOL_RUNTIME_TASKS_TASK_INPUTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/client/callback_thread.h"
#include "runtime/objects/object_store.h"
#include "runtime/rpc/frame_socket.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/worker_protocol.h"
#include "transport/object_transfer.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

class TaskInputs {
 public:
  // How this worker reaches UCX, made on first use; both null when it cannot.
  struct Ucx {
    transport::UcxWorker* worker = nullptr;
    transport::ObjectFetcher* fetcher = nullptr;
  };
  // `kept`: this worker's kept result under its id, retained, or null when it is gone.
  TaskInputs(ObjectStore* store, FrameSocket* driver, std::function<detail::ObjectHeader*(uint64_t)> kept,
             std::function<Ucx()> ucx)
      : store_(*store), driver_(driver), kept_(std::move(kept)), ucx_(std::move(ucx)) {}
  // Runs nothing more of its fetches' completions (the fetcher, destroyed first, ended them).
  ~TaskInputs();

  // The input `at` describes, as an entry for the task's deps (retained for the caller): its
  // value comes as the input's encoded bytes (detail::EncodedValue).
  detail::ObjectHeader* Input(const wire::InputAt& at) ABSL_LOCKS_EXCLUDED(mu_);
  // The driver's answer to an input's Fetch; false when it was not one (DriverImports' then).
  bool OnFetched(const wire::FetchedView& answer) ABSL_LOCKS_EXCLUDED(mu_);
  // The worker stops serving: inputs still waiting fail with `why`, and nothing more is sent.
  void Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  // A kept result's bytes from the worker that keeps it (`at`: its UCX address, its id there and
  // size), or why not; `done` runs on this class's completion thread (or at once, on this one,
  // when no fetch could start). Also how this worker's imports of the driver's objects get one a
  // worker keeps (DriverImports, on the driver's word: wire::FetchFrom).
  using BytesDone = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;
  void FromKeeper(const wire::InputAt& at, BytesDone done) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Inputs on their way, by the input entry's id (the request id of an ask to the driver), with
  // the driver's object id, whether the driver was asked, and why it was not fetched directly
  // (said in an error). Each holds a reference on its entry until it resolves; Stop fails them all.
  struct Waiting {
    ObjectEntry* entry = nullptr;
    uint64_t object = 0;
    bool asked = false;
    std::string why_not_direct;
  };
  // Asks the driver for the waiting input `id` (nothing when it no longer waits: stopped).
  void AskDriver(uint64_t id, std::string why_not_direct) ABSL_LOCKS_EXCLUDED(mu_);
  // The thread fetches end on, made with the first fetch.
  CallbackThread* Completions() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the waiting input `id` out; false when it is not waiting.
  bool Take(uint64_t id, Waiting* out) ABSL_LOCKS_EXCLUDED(mu_);
  // Resolves a taken input and lets go of its reference.
  void Resolve(const Waiting& input, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure);
  std::exception_ptr Failure(const Waiting& input, ErrorCode code, absl::string_view why) const;

  ObjectStore& store_;
  FrameSocket* const driver_;
  const std::function<detail::ObjectHeader*(uint64_t)> kept_;
  const std::function<Ucx()> ucx_;
  Mutex send_mu_;  // serialises sends with Stop: nothing is sent once it returned
  bool stopped_ ABSL_GUARDED_BY(send_mu_) = false;
  Mutex mu_;
  absl::Status stop_why_ ABSL_GUARDED_BY(mu_);  // set by Stop: new inputs fail with it
  std::map<uint64_t, Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> unreachable_ ABSL_GUARDED_BY(mu_);  // keepers' addresses a fetch failed to reach
  std::unique_ptr<CallbackThread> completions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_TASK_INPUTS_H_
