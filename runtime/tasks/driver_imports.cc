// File: runtime/tasks/driver_imports.cc
#include "runtime/tasks/driver_imports.h"

#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/error.h"

namespace gpupool::runtime {
void DriverImports::Send(const std::string& frame) {
  MutexLock lock(&send_mu_);
  if (stopped_) return;
  // A failed send means the connection is going: Serve ends, and Stop fails what still waits.
  (void)driver_->Send(frame);
}

detail::ObjectHeader* DriverImports::Import(ObjectId id, detail::BoxDecoder decode) {
  ObjectEntry* entry;
  std::vector<ObjectEntry*> evicted;
  bool stopping;
  {
    MutexLock lock(&mu_);
    if (ObjectEntry* live = store_.Lookup(id)) return live;
    entry = store_.CreatePendingWithId(id);
    stopping = stopping_;
    if (!stopping) {
      waiting_[id] = {entry, Record{.decode = decode}};
      detail::Retain(entry);
      kept_.push_back(entry);
      // Past kKeptIdle, the oldest copies nothing else holds go (their borrows with them).
      for (auto it = kept_.begin(); kept_.size() > kKeptIdle && it != kept_.end();) {
        if ((*it)->refs.load(std::memory_order_acquire) == 1) {
          evicted.push_back(*it);
          it = kept_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  if (stopping) {
    detail::Retain(entry);  // Resolve lets go of one reference: the caller's stays
    Resolve(entry, nullptr,
            std::make_exception_ptr(Error(ErrorCode::kCancelled, absl::StrCat("object ", id, " of the driver: the "
                                                                              "worker is stopping"))));
    return entry;
  }
  for (ObjectEntry* e : evicted) detail::Release(e);
  // Before anything could free the entry (and send the Release): the driver keeps the object for
  // this worker from here on.
  Send(wire::Encode(wire::Borrow{.object = id}));
  bool wanted = false;
  std::vector<Task*> made;
  if (store_.MarkRemote(entry, &wanted, &made)) {
    for (Task* t : made) resolved_(t, entry);
    if (wanted) Want(entry);
  }
  return entry;
}

void DriverImports::Want(ObjectEntry* entry) {
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(entry->id);
    if (it == waiting_.end() || it->second.first != entry || it->second.second.asked) return;
    it->second.second.asked = true;
  }
  Send(wire::Encode(wire::Fetch{.request = entry->id, .object = entry->id}));
}

void DriverImports::Resolve(ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure) {
  std::vector<Task*> waiting = failure ? store_.Fail(entry, std::move(failure)) : store_.Complete(entry, std::move(value));
  for (Task* t : waiting) resolved_(t, entry);
  detail::Release(entry);
}

void DriverImports::OnFetched(const wire::FetchedView& answer) {
  ObjectEntry* entry;
  Record record;
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(answer.request);
    if (it == waiting_.end()) return;  // freed meanwhile
    entry = it->second.first;
    record = it->second.second;
    waiting_.erase(it);
    if (!ObjectStore::TryRetain(entry)) return;  // being freed
  }
  const ObjectId id = entry->id;
  std::unique_ptr<detail::ValueBox> value;
  std::exception_ptr failure;
  if (answer.pending) {
    failure = std::make_exception_ptr(
        Error(ErrorCode::kInternal, absl::StrCat("object ", id, " of the driver: the driver said it was pending")));
  } else if (answer.code != 0) {
    failure = std::make_exception_ptr(Error(static_cast<ErrorCode>(answer.code),
                                            absl::StrCat("object ", id, " of the driver: ", answer.message)));
  } else {
    try {
      Reader r(answer.value);
      value = record.decode(r);
    } catch (const std::exception& e) {  // Error, or whatever a user's codec throws
      failure = std::make_exception_ptr(
          Error(ErrorCode::kDataLoss, absl::StrCat("object ", id, " of the driver arrived unreadable: ", e.what())));
    }
  }
  Resolve(entry, std::move(value), failure);
}

void DriverImports::AskThroughDriver(ObjectId id) {
  {
    MutexLock lock(&mu_);
    // Freed meanwhile (its Release went): the driver must not fetch for nobody.
    if (!waiting_.contains(id)) return;
  }
  Send(wire::Encode(wire::Fetch{.request = id, .object = id, .through_driver = true}));
}

void DriverImports::OnFetchFrom(const wire::FetchFrom& where) {
  const ObjectId id = where.request;
  {
    MutexLock lock(&mu_);
    if (!waiting_.contains(id)) return;  // freed (or stopped) meanwhile
  }
  // Read as the driver's answer would be: the bytes are the same.
  auto deliver = [this, id](std::string_view bytes) {
    OnFetched(wire::FetchedView{.request = id, .value = bytes});
  };
  if (where.at.here) {
    if (detail::ObjectHeader* kept = kept_result_ ? kept_result_(where.at.held) : nullptr) {
      const detail::ValueBox& box = detail::AwaitValue(kept, std::chrono::steady_clock::time_point::max());
      deliver(static_cast<const detail::EncodedValue&>(box).bytes);  // KeptResult: always its bytes
      detail::Release(kept);
    } else {
      AskThroughDriver(id);  // let go of meanwhile: the driver read it, and has it
    }
    return;
  }
  if (!from_keeper_) {
    AskThroughDriver(id);
    return;
  }
  from_keeper_(where.at, [this, id, deliver](absl::StatusOr<std::string> bytes) {
    if (bytes.ok()) {
      deliver(*bytes);
    } else {
      AskThroughDriver(id);
    }
  });
}

void DriverImports::Forget(ObjectEntry* entry) {
  {
    MutexLock lock(&mu_);
    auto it = waiting_.find(entry->id);
    if (it != waiting_.end() && it->second.first == entry) waiting_.erase(it);
  }
  Send(wire::Encode(wire::Release{.object = entry->id, .count = 1}));  // the borrow ends
}

void DriverImports::DropIdle() {
  std::vector<ObjectEntry*> idle;
  {
    MutexLock lock(&mu_);
    for (auto it = kept_.begin(); it != kept_.end();) {
      if ((*it)->refs.load(std::memory_order_acquire) == 1) {
        idle.push_back(*it);
        it = kept_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (ObjectEntry* entry : idle) detail::Release(entry);  // outside mu_: Forget takes it
}

void DriverImports::Stop(const absl::Status& why) {
  {
    MutexLock lock(&send_mu_);
    stopped_ = true;
  }
  std::vector<ObjectEntry*> failing;
  std::deque<ObjectEntry*> kept;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, waiting] : waiting_) {
      if (ObjectStore::TryRetain(waiting.first)) failing.push_back(waiting.first);
    }
    waiting_.clear();
    kept.swap(kept_);
  }
  for (ObjectEntry* entry : failing) {
    Resolve(entry, nullptr,
            std::make_exception_ptr(Error(static_cast<ErrorCode>(why.code()),
                                          absl::StrCat("object ", entry->id, " of the driver: ", why.message()))));
  }
  for (ObjectEntry* entry : kept) detail::Release(entry);
}

}  // namespace gpupool::runtime
