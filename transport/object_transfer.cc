#include "transport/object_transfer.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "transport/fetch_wire.h"

namespace gpupool::transport {
namespace {

// The longest id a request on `worker` can carry.
size_t MaxIdBytes(const UcxWorker& worker) {
  const size_t header = worker.max_am_header();
  const size_t fixed = kFetchRequestFixedBytes + kMaxAccessKeyBytes;
  return std::min(kMaxObjectIdBytes, header > fixed ? header - fixed : 0);
}

}  // namespace

// --- ObjectRegistry ----------------------------------------------------------------------------

ObjectRegistry::~ObjectRegistry() {
  absl::MutexLock lock(&mu_);
  assert(total_pins_ == 0 && "ObjectRegistry destroyed while a transfer reads it");
}

absl::Status ObjectRegistry::Add(std::string id, absl::Span<const std::byte> bytes) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.try_emplace(std::move(id));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("object '", it->first, "' is already served"));
  }
  it->second = std::make_unique<Entry>(Entry{bytes, 0});
  return absl::OkStatus();
}

absl::Status ObjectRegistry::Remove(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("object '", id, "' is not served"));
  }
  // New lookups miss it from now on; transfers already reading it hold `entry` alive.
  std::unique_ptr<Entry> entry = std::move(it->second);
  entries_.erase(it);
  Entry* e = entry.get();
  mu_.Await(absl::Condition(+[](Entry* e) { return e->pins == 0; }, e));
  return absl::OkStatus();
}

absl::Status ObjectRegistry::RemoveThen(absl::string_view id, absl::AnyInvocable<void() &&> done) {
  absl::Status status = absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      status = absl::NotFoundError(absl::StrCat("object '", id, "' is not served"));
    } else {
      std::unique_ptr<Entry> entry = std::move(it->second);
      entries_.erase(it);
      if (entry->pins > 0) {  // the last transfer to end runs `done` (Lookup's release)
        entry->then = std::move(done);
        Entry* e = entry.get();
        retiring_.emplace(e, std::move(entry));
        return absl::OkStatus();
      }
    }
  }
  std::move(done)();
  return status;
}

ObjectLookup ObjectRegistry::AsLookup() {
  return [this](absl::string_view id) { return Lookup(id); };
}

absl::StatusOr<ServedObject> ObjectRegistry::Lookup(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("object '", id, "' is not served"));
  }
  Entry* entry = it->second.get();
  ++entry->pins;
  ++total_pins_;
  return ServedObject{entry->bytes, [this, entry] {
                        absl::AnyInvocable<void() &&> then;
                        {
                          absl::MutexLock lock(&mu_);
                          --entry->pins;
                          --total_pins_;
                          if (entry->pins == 0 && entry->then) {
                            then = std::move(entry->then);
                            retiring_.erase(entry);
                          }
                        }
                        if (then) std::move(then)();  // outside the lock: it may free what it names
                      }};
}

// --- ObjectServer ------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ObjectServer>> ObjectServer::Start(UcxWorker& worker,
                                                                 ObjectLookup lookup,
                                                                 std::string access_key) {
  if (access_key.size() > kMaxAccessKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("an access key of ", access_key.size(),
                                                   " bytes; at most ", kMaxAccessKeyBytes));
  }
  std::unique_ptr<ObjectServer> server(new ObjectServer(worker, std::move(lookup), std::move(access_key)));
  ObjectServer* s = server.get();
  worker.SetAmHandler(AmId::kFetchRequest, [s](AmMessage& message) { s->OnRequest(message); });
  return server;
}

ObjectServer::ObjectServer(UcxWorker& worker, ObjectLookup lookup, std::string access_key)
    : worker_(worker), lookup_(std::move(lookup)), access_key_(std::move(access_key)) {}

ObjectServer::~ObjectServer() {
  worker_.ClearAmHandler(AmId::kFetchRequest);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &in_flight_));
}

ObjectServer::Stats ObjectServer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ObjectServer::OnRequest(AmMessage& message) {
  absl::StatusOr<FetchRequest> request =
      DecodeFetchRequest(message.header(), MaxIdBytes(worker_));
  if (!request.ok() || message.data_size() != 0) {
    // Without a well-formed request there is no request id to answer: count it and drop it.
    absl::MutexLock lock(&mu_);
    ++stats_.rejected;
    return;
  }
  // A wrong key learns nothing, not even whether the object exists.
  const bool allowed = SameAccessKey(request->access_key, access_key_);
  absl::StatusOr<ServedObject> object =
      allowed ? lookup_(request->object_id)
              : absl::StatusOr<ServedObject>(absl::PermissionDeniedError(
                    "fetch refused: the request does not carry the owner's access key"));
  {
    absl::MutexLock lock(&mu_);
    ++(!allowed ? stats_.refused : object.ok() ? stats_.served : stats_.not_found);
    ++in_flight_;
  }
  absl::Span<const std::byte> bytes;
  absl::AnyInvocable<void() &&> release;
  if (object.ok()) {
    bytes = object->bytes;
    release = std::move(object->release);
  }
  worker_.Reply(message, AmId::kFetchReply,
                EncodeFetchReply(request->request_id, object.status(), bytes.size()),
                bytes.data(), bytes.size(),
                [this, release = std::move(release)](absl::Status sent) mutable {
                  if (release) std::move(release)();
                  absl::MutexLock lock(&mu_);
                  if (!sent.ok()) ++stats_.failed_sends;
                  --in_flight_;
                });
}

// --- ObjectFetcher -----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ObjectFetcher>> ObjectFetcher::Create(UcxWorker& worker,
                                                                    std::string access_key) {
  if (access_key.size() > kMaxAccessKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("an access key of ", access_key.size(),
                                                   " bytes; at most ", kMaxAccessKeyBytes));
  }
  std::unique_ptr<ObjectFetcher> fetcher(new ObjectFetcher(worker, std::move(access_key)));
  ObjectFetcher* f = fetcher.get();
  worker.SetAmHandler(AmId::kFetchReply, [f](AmMessage& message) { f->OnReply(message); });
  worker.RunInLoop([f] {
    f->failure_listener_ = f->worker_.AddPeerFailureListener(
        [f](PeerId peer, const absl::Status& status) { f->OnPeerFailed(peer, status); });
  });
  return fetcher;
}

ObjectFetcher::ObjectFetcher(UcxWorker& worker, std::string access_key)
    : worker_(worker), access_key_(std::move(access_key)) {}

ObjectFetcher::~ObjectFetcher() {
  worker_.ClearAmHandler(AmId::kFetchReply);
  worker_.RunInLoop([this] {
    closing_ = true;
    std::vector<uint64_t> waiting;
    for (const auto& [request, fetch] : pending_) {
      if (fetch.phase == Phase::kAwaitingReply) waiting.push_back(request);
    }
    for (uint64_t request : waiting) {
      Finish(request, absl::CancelledError("the object fetcher was destroyed"));
    }
  });
  {
    // Receiving fetches end when UCX completes or fails their receive.
    absl::MutexLock lock(&live_mu_);
    live_mu_.Await(absl::Condition(+[](int* n) { return *n == 0; }, &live_));
  }
  worker_.RunInLoop([this] { worker_.RemovePeerFailureListener(failure_listener_); });
}

absl::StatusOr<size_t> ObjectFetcher::FetchInto(PeerId owner, absl::string_view id,
                                                absl::Span<std::byte> dst,
                                                const FetchOptions& options) {
  absl::StatusOr<FetchedObject> result;
  absl::Notification done;
  FetchIntoAsync(owner, id, dst, options, [&](absl::StatusOr<FetchedObject> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  if (!result.ok()) return result.status();
  return result->size;
}

absl::StatusOr<FetchedObject> ObjectFetcher::Fetch(PeerId owner, absl::string_view id,
                                                   const FetchOptions& options) {
  absl::StatusOr<FetchedObject> result;
  absl::Notification done;
  FetchAsync(owner, id, options, [&](absl::StatusOr<FetchedObject> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

void ObjectFetcher::FetchIntoAsync(PeerId owner, absl::string_view id, absl::Span<std::byte> dst,
                                   const FetchOptions& options, FetchDone done) {
  {
    absl::MutexLock lock(&live_mu_);
    ++live_;
  }
  worker_.Post([this, owner, id = std::string(id), dst, timeout = options.timeout,
                done = std::move(done)]() mutable {
    Start(owner, std::move(id), dst, /*allocate=*/false, timeout, std::move(done));
  });
}

void ObjectFetcher::FetchAsync(PeerId owner, absl::string_view id, const FetchOptions& options,
                               FetchDone done) {
  {
    absl::MutexLock lock(&live_mu_);
    ++live_;
  }
  worker_.Post([this, owner, id = std::string(id), timeout = options.timeout,
                done = std::move(done)]() mutable {
    Start(owner, std::move(id), {}, /*allocate=*/true, timeout, std::move(done));
  });
}

void ObjectFetcher::Start(PeerId owner, std::string id, absl::Span<std::byte> dst, bool allocate,
                          absl::Duration timeout, FetchDone done) {
  uint64_t request = next_request_++;
  Pending& fetch = pending_[request];
  fetch.owner = owner;
  fetch.owner_name = worker_.PeerName(owner);
  fetch.id = std::move(id);
  fetch.dst = dst;
  fetch.allocate = allocate;
  fetch.done = std::move(done);
  size_t max_id = MaxIdBytes(worker_);
  if (closing_) {
    Finish(request, absl::CancelledError("the object fetcher was destroyed"));
    return;
  }
  if (fetch.id.size() > max_id) {
    Finish(request, absl::InvalidArgumentError(absl::StrCat(
                        "object id of ", fetch.id.size(), " bytes; at most ", max_id)));
    return;
  }
  fetch.timer = worker_.AddTimer(absl::Now() + timeout, [this, request] { OnDeadline(request); });
  worker_.SendAm(owner, AmId::kFetchRequest, EncodeFetchRequest(request, fetch.id, access_key_), nullptr, 0,
                 /*reply=*/true, [this, request](absl::Status sent) {
                   auto it = pending_.find(request);
                   if (sent.ok() || it == pending_.end()) return;
                   if (it->second.phase == Phase::kAwaitingReply) {
                     Finish(request, Context(it->second, sent));
                   }
                 });
}

void ObjectFetcher::OnReply(AmMessage& message) {
  absl::StatusOr<FetchReply> reply = DecodeFetchReply(message.header());
  if (!reply.ok()) return;  // not from a well-behaved owner; nothing to attribute it to
  auto it = pending_.find(reply->request_id);
  // A reply after its fetch ended (deadline, owner failure) is dropped.
  if (it == pending_.end() || it->second.phase != Phase::kAwaitingReply) return;
  Pending& fetch = it->second;
  uint64_t request = it->first;
  if (!reply->status.ok()) {
    if (absl::IsNotFound(reply->status)) {
      Finish(request, absl::NotFoundError(absl::StrCat("object '", fetch.id,
                                                       "' not found at owner '",
                                                       fetch.owner_name, "'")));
    } else {
      Finish(request, Context(fetch, reply->status));
    }
    return;
  }
  size_t size = message.data_size();
  if (reply->object_size != size) {
    Finish(request, Context(fetch, absl::DataLossError(absl::StrCat(
                                       "reply announces ", reply->object_size,
                                       " bytes but carries ", size))));
    return;
  }
  if (fetch.allocate) {
    // The size comes from the owner: a refusal is this fetch's error, not the process's.
    fetch.buffer.data.reset(new (std::nothrow) std::byte[size]);
    if (fetch.buffer.data == nullptr) {
      Finish(request, absl::ResourceExhaustedError(absl::StrCat(
                          "object '", fetch.id, "' from '", fetch.owner_name, "' is ", size,
                          " bytes; that much memory could not be allocated")));
      return;
    }
    fetch.dst = absl::Span<std::byte>(fetch.buffer.data.get(), size);
  } else if (size > fetch.dst.size()) {
    Finish(request, absl::OutOfRangeError(absl::StrCat(
                        "object '", fetch.id, "' from '", fetch.owner_name, "' is ", size,
                        " bytes; the destination holds ", fetch.dst.size())));
    return;
  }
  fetch.buffer.size = size;
  if (!message.is_rendezvous()) {
    if (size > 0) std::memcpy(fetch.dst.data(), message.eager_data().data(), size);
    Finish(request, std::move(fetch.buffer));
    return;
  }
  fetch.phase = Phase::kReceiving;
  worker_.ReceiveAmData(message, fetch.dst.data(),
                        [this, request](absl::Status status) { OnReceived(request, status); });
}

void ObjectFetcher::OnReceived(uint64_t request, absl::Status status) {
  auto it = pending_.find(request);
  assert(it != pending_.end());
  Pending& fetch = it->second;
  if (!fetch.deadline.ok()) {
    Finish(request, fetch.deadline);
  } else if (!status.ok()) {
    Finish(request, Context(fetch, status));
  } else {
    Finish(request, std::move(fetch.buffer));
  }
}

void ObjectFetcher::OnDeadline(uint64_t request) {
  auto it = pending_.find(request);
  if (it == pending_.end()) return;
  Pending& fetch = it->second;
  fetch.timer = 0;
  absl::Status expired = absl::DeadlineExceededError(
      absl::StrCat("fetching object '", fetch.id, "' from '", fetch.owner_name,
                   "': no complete reply in time"));
  if (fetch.phase == Phase::kAwaitingReply) {
    Finish(request, expired);
    return;
  }
  // Bytes are landing in the destination and UCX cannot stop a rendezvous halfway: reset the
  // owner's endpoint, which fails the receive, and report the deadline when it does.
  fetch.deadline = expired;
  worker_.FailPeer(fetch.owner, expired);
}

void ObjectFetcher::OnPeerFailed(PeerId peer, const absl::Status& status) {
  std::vector<uint64_t> failed;
  for (const auto& [request, fetch] : pending_) {
    // Receiving fetches fail through their receive's completion (the endpoint's force-close
    // cancels it), once UCX no longer writes their destination.
    if (fetch.owner == peer && fetch.phase == Phase::kAwaitingReply) failed.push_back(request);
  }
  for (uint64_t request : failed) Finish(request, Context(pending_.at(request), status));
}

void ObjectFetcher::Finish(uint64_t request, absl::StatusOr<FetchedObject> result) {
  auto it = pending_.find(request);
  assert(it != pending_.end());
  if (it->second.timer != 0) worker_.CancelTimer(it->second.timer);
  FetchDone done = std::move(it->second.done);
  pending_.erase(it);
  std::move(done)(std::move(result));
  absl::MutexLock lock(&live_mu_);
  --live_;
}

absl::Status ObjectFetcher::Context(const Pending& fetch, const absl::Status& status) const {
  return absl::Status(status.code(), absl::StrCat("fetching object '", fetch.id, "' from '",
                                                  fetch.owner_name, "': ", status.message()));
}

}  // namespace gpupool::transport
