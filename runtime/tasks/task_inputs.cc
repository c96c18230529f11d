// File: runtime/tasks/task_inputs.cc
#include "runtime/tasks/task_inputs.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gpupool/error.h"

namespace gpupool::runtime {

detail::ObjectHeader* TaskInputs::Input(const wire::InputAt& at) {
  std::string why_not_direct;
  if (at.here) {
    if (detail::ObjectHeader* kept = kept_(at.held)) return kept;  // read in place
    why_not_direct = "this worker no longer keeps it";
  }
  ObjectEntry* entry = store_.CreatePending();  // the caller's reference
  const uint64_t id = entry->id;
  absl::Status stopped;
  {
    MutexLock lock(&mu_);
    stopped = stop_why_;
    if (stopped.ok()) {
      detail::Retain(entry);  // the waiting input's, until it resolves
      waiting_[id] = Waiting{.entry = entry, .object = at.object};
    }
  }
  if (!stopped.ok()) {
    const Waiting input{.entry = entry, .object = at.object};
    detail::Retain(entry);  // Resolve lets go of one: the caller's stays
    Resolve(input, nullptr, Failure(input, static_cast<ErrorCode>(stopped.code()), stopped.message()));
    return entry;
  }
  if (!at.here && !at.ucx_address.empty()) {
    FromKeeper(at, [this, id](absl::StatusOr<std::string> bytes) {
      if (!bytes.ok()) {
        // The keeper let go of the bytes (the driver fetched them meanwhile), died, or cannot be
        // reached: the driver has the value, or knows why nobody does.
        AskDriver(id, bytes.status().ToString());
        return;
      }
      Waiting input;
      if (!Take(id, &input)) return;  // failed by Stop meanwhile
      Resolve(input, std::make_unique<detail::EncodedValue>(*std::move(bytes)), nullptr);
    });
    return entry;
  }
  AskDriver(id, std::move(why_not_direct));
  return entry;
}

CallbackThread* TaskInputs::Completions() {
  MutexLock lock(&mu_);
  if (completions_ == nullptr) completions_ = std::make_unique<CallbackThread>();
  return completions_.get();
}

TaskInputs::~TaskInputs() {
  CallbackThread* completions;
  {
    MutexLock lock(&mu_);
    completions = completions_.get();
  }
  if (completions != nullptr) completions->Stop();  // what it has not run finds nothing waiting
}

void TaskInputs::FromKeeper(const wire::InputAt& at, BytesDone done) {
  bool unreachable;
  {
    MutexLock lock(&mu_);
    unreachable = unreachable_.contains(at.ucx_address);
  }
  if (unreachable) {
    done(absl::UnavailableError("an earlier fetch from the worker that keeps it failed"));
    return;
  }
  Ucx ucx = ucx_();
  if (ucx.fetcher == nullptr) {
    done(absl::UnavailableError("this worker cannot start UCX"));
    return;
  }
  absl::StatusOr<transport::PeerId> keeper =
      ucx.worker->Connect(at.ucx_address, absl::StrCat("the worker that keeps object ", at.object));
  if (!keeper.ok()) {
    done(keeper.status());
    return;
  }
  CallbackThread* completions = Completions();
  const transport::FetchOptions options = transport::kWholeObjectFetch;
  // Its size known, the bytes land straight in the string the reader takes (no copy); otherwise
  // in a buffer of the size the keeper says, copied once.
  auto room = std::make_shared<std::string>();
  if (at.bytes > 0) {
    try {
      room->resize(at.bytes);
    } catch (const std::exception&) {  // no room that big (or a size that makes no sense)
      room->clear();                   // the fetcher sizes its own buffer, or says why not
    }
  }
  // Shared: the completion thread takes copyable closures.
  auto on_done = std::make_shared<BytesDone>(std::move(done));
  auto finish = [this, completions, keeper = at.ucx_address, room, on_done](absl::StatusOr<transport::FetchedObject> got) {
    // Off UCX's thread: a copy, a decode or a send to the driver would hold up its other transfers.
    auto result = std::make_shared<absl::StatusOr<transport::FetchedObject>>(std::move(got));
    completions->Post([this, keeper, room, result, on_done] {
      BytesDone& done = *on_done;
      if (!result->ok()) {
        // One that could not be reached (or answered too late) is not tried again: each try
        // could wait its whole deadline.
        if (transport::OwnerUnreachable(result->status())) {
          MutexLock lock(&mu_);
          unreachable_.insert(keeper);
        }
        done(result->status());
        return;
      }
      std::string bytes;
      if ((*result)->data == nullptr) {  // into `room`, made the size the driver said
        room->resize((*result)->size);
        bytes = std::move(*room);
      } else {
        bytes.assign(reinterpret_cast<const char*>((*result)->data.get()), (*result)->size);
      }
      done(std::move(bytes));
    });
  };
  if (!room->empty()) {
    ucx.fetcher->FetchIntoAsync(*keeper, std::to_string(at.held),
                                absl::MakeSpan(reinterpret_cast<std::byte*>(room->data()), room->size()), options,
                                std::move(finish));
  } else {
    ucx.fetcher->FetchAsync(*keeper, std::to_string(at.held), options, std::move(finish));
  }
}

void TaskInputs::AskDriver(uint64_t id, std::string why_not_direct) {
  uint64_t object;
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(id);
    if (it == waiting_.end()) return;  // failed by Stop meanwhile
    it->second.asked = true;
    it->second.why_not_direct = std::move(why_not_direct);
    object = it->second.object;
  }
  MutexLock lock(&send_mu_);
  // A failed send means the connection is going: Serve ends, and Stop fails what still waits.
  if (!stopped_) {
    (void)driver_->Send(
        wire::Encode(wire::Fetch{.request = id, .object = object, .through_driver = true, .for_input = true}));
  }
}

bool TaskInputs::OnFetched(const wire::FetchedView& answer) {
  Waiting input;
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(answer.request);
    if (it == waiting_.end() || !it->second.asked) return false;
    input = std::move(it->second);
    waiting_.erase(it);
  }
  if (answer.code == 0 && !answer.pending) {
    Resolve(input, std::make_unique<detail::EncodedValue>(std::string(answer.value)), nullptr);
  } else if (answer.pending) {
    // Its keeper died and its task runs again: the task goes back to the driver to wait for it
    // (Executor::AwaitInputs hands back a task whose input is marked so), not holding its lease.
    input.entry->remade_at_driver.store(true, std::memory_order_release);
    Resolve(input, nullptr, Failure(input, ErrorCode::kUnavailable, "it is being made again: its keeper died"));
  } else {
    Resolve(input, nullptr, Failure(input, static_cast<ErrorCode>(answer.code), answer.message));
  }
  return true;
}

void TaskInputs::Stop(const absl::Status& why) {
  {
    MutexLock lock(&send_mu_);
    stopped_ = true;
  }
  const absl::Status reason = why.ok() ? absl::CancelledError("the worker is stopping") : why;
  std::map<uint64_t, Waiting> failing;
  {
    MutexLock lock(&mu_);
    stop_why_ = reason;
    failing.swap(waiting_);
  }
  // A fetch from a keeper still under way finds nothing when it ends: the task reading the input
  // stops now, not when the transfer ends.
  for (auto& [id, input] : failing) {
    Resolve(input, nullptr, Failure(input, static_cast<ErrorCode>(reason.code()), reason.message()));
  }
}

bool TaskInputs::Take(uint64_t id, Waiting* out) {
  MutexLock lock(&mu_);
  auto it = waiting_.find(id);
  if (it == waiting_.end()) return false;
  *out = std::move(it->second);
  waiting_.erase(it);
  return true;
}

std::exception_ptr TaskInputs::Failure(const Waiting& input, ErrorCode code, absl::string_view why) const {
  const std::string before = input.why_not_direct.empty()
                                 ? ""
                                 : absl::StrCat(" (not from the worker that kept it: ", input.why_not_direct, ")");
  return std::make_exception_ptr(Error(code, absl::StrCat("input object ", input.object, " of the driver", before, ": ", why)));
}

void TaskInputs::Resolve(const Waiting& input, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure) {
  // Nothing depends on an input's entry but its task, which reads it through AwaitValue: the
  // tasks a resolution returns are none.
  if (failure) store_.Fail(input.entry, std::move(failure));
  else store_.Complete(input.entry, std::move(value));
  detail::Release(input.entry);
}

}  // namespace gpupool::runtime
