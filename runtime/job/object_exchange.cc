#include "runtime/job/object_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpupool/error.h"
#include "transport/object_transfer.h"
#include "runtime/tasks/task.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

namespace {

// What the owner answers while the object's task is still running: the importer asks again.
// kAborted because no other answer uses it (Unavailable means the owner itself failed).
constexpr absl::StatusCode kNotReady = absl::StatusCode::kAborted;

std::string FailureMessage(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "a non-standard exception";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ObjectExchange>> ObjectExchange::Start(JobGroup& group, ObjectStore& store,
                                                                       Resolve resolve, Rebuild rebuild,
                                                                       absl::Duration patience) {
  std::unique_ptr<ObjectExchange> x(
      new ObjectExchange(group, store, std::move(resolve), std::move(rebuild), patience));
  if (group.worker() == nullptr) return x;  // a job of one process
  // The server first: peers may fetch as soon as a ref has been sent.
  absl::StatusOr<std::unique_ptr<transport::ObjectServer>> server = transport::ObjectServer::Start(
      *group.worker(), [raw = x.get()](absl::string_view id) { return raw->Lookup(id); });
  if (!server.ok()) return server.status();
  x->server_ = *std::move(server);
  absl::StatusOr<std::unique_ptr<transport::ObjectFetcher>> fetcher = transport::ObjectFetcher::Create(*group.worker());
  if (!fetcher.ok()) return fetcher.status();
  x->fetcher_ = *std::move(fetcher);
  x->fetch_thread_ = std::thread([raw = x.get()] { raw->FetchLoop(); });
  return x;
}

ObjectExchange::ObjectExchange(JobGroup& group, ObjectStore& store, Resolve resolve, Rebuild rebuild,
                               absl::Duration patience)
    : group_(group), store_(store), resolve_(std::move(resolve)), rebuild_(std::move(rebuild)), patience_(patience) {}

ObjectExchange::~ObjectExchange() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (fetch_thread_.joinable()) fetch_thread_.join();
  fetcher_.reset();
  server_.reset();  // waits for replies in flight: nothing reads the bytes below after this
  std::map<ObjectId, Exported> exported;
  std::deque<Fetch> unfetched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exported.swap(exported_);
    unfetched.swap(to_fetch_);
  }
  for (Fetch& f : unfetched) {
    resolve_(f.entry, nullptr,
             std::make_exception_ptr(Error(ErrorCode::kCancelled, "the runtime stopped before the object was fetched")));
    detail::Release(f.entry);
  }
  for (auto& [id, e] : exported) detail::Release(e.entry);
}

std::string ObjectExchange::Export(ObjectEntry* entry) {
  if (group_.worker() == nullptr) return "";  // nobody to serve
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = exported_.try_emplace(entry->id, Exported{entry, {}, false});
    if (inserted) detail::Retain(entry);
  }
  // The producing task is known while the object is pending (the store clears it, under the
  // entry's lock, before the task is deleted).
  std::lock_guard<std::mutex> lock(entry->mu);
  const Task* producer = entry->producer;
  if (producer == nullptr || !producer->deps.empty() || !producer->nested.empty()) return "";
  return EncodeLineage(Lineage{producer->function->name, producer->args, producer->shape->options});
}

ObjectEntry* ObjectExchange::Import(ObjectId id, detail::BoxDecoder decode, std::string lineage) {
  const int owner = OwnerOf(id);
  if (group_.worker() == nullptr || owner >= group_.size()) {
    throw Error(ErrorCode::kNotFound,
                absl::StrCat("object ", id, " belongs to rank ", owner, ", which this job (", group_.size(),
                             " rank(s)) does not have"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ObjectEntry* live = store_.Lookup(id)) return live;  // imported already, still referenced
  if (stopping_) throw Error(ErrorCode::kCancelled, "the runtime is stopping");
  ObjectEntry* entry = store_.CreatePendingWithId(id);
  detail::Retain(entry);  // the fetch's count
  to_fetch_.push_back(Fetch{entry, decode, std::move(lineage)});
  cv_.notify_all();
  return entry;
}

absl::StatusOr<transport::ServedObject> ObjectExchange::Lookup(absl::string_view text) {
  ObjectId id = 0;
  if (!absl::SimpleAtoi(text, &id)) return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an object id"));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exported_.find(id);
  if (it == exported_.end()) {
    return absl::NotFoundError(absl::StrCat("object ", id, " was never sent from rank ", group_.rank()));
  }
  Exported& e = it->second;
  switch (e.entry->state.load(std::memory_order_acquire)) {
    case detail::kObjectPending:
      return absl::Status(kNotReady, absl::StrCat("object ", id, " is not ready yet"));
    case detail::kObjectFailed:
      return absl::FailedPreconditionError(
          absl::StrCat("object ", id, " failed on rank ", group_.rank(), ": ", FailureMessage(e.entry->failure)));
    default:
      break;
  }
  if (!e.encoded) {
    try {
      e.entry->value->EncodeTo(e.bytes);
    } catch (const std::exception& ex) {
      return absl::UnimplementedError(absl::StrCat("object ", id, " cannot be sent: ", ex.what()));
    }
    e.encoded = true;
  }
  return transport::ServedObject{
      absl::MakeConstSpan(reinterpret_cast<const std::byte*>(e.bytes.data()), e.bytes.size()), nullptr};
}

void ObjectExchange::FetchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !to_fetch_.empty(); });
    if (stopping_) return;
    Fetch f = to_fetch_.front();
    to_fetch_.pop_front();
    lock.unlock();
    FetchOne(f);
    detail::Release(f.entry);
    lock.lock();
  }
}

void ObjectExchange::FetchOne(Fetch& f) {
  const ObjectId id = f.entry->id;
  const int owner = OwnerOf(id);
  auto fail = [&](ErrorCode code, const std::string& why) {
    resolve_(f.entry, nullptr,
             std::make_exception_ptr(Error(code, absl::StrCat("object ", id, " could not be fetched from rank ", owner,
                                                              ": ", why))));
  };
  absl::StatusOr<transport::PeerId> peer = group_.worker()->Connect(group_.address(owner), absl::StrCat("rank ", owner));
  if (!peer.ok()) {
    if (!f.lineage.empty()) return RebuildOne(f, std::string(peer.status().message()));
    return fail(static_cast<ErrorCode>(peer.status().code()), std::string(peer.status().message()));
  }
  const auto give_up = std::chrono::steady_clock::now() + absl::ToChronoSeconds(patience_);
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    absl::StatusOr<transport::FetchedObject> got = fetcher_->Fetch(*peer, absl::StrCat(id));
    if (got.ok()) {
      std::unique_ptr<detail::ValueBox> value;
      try {
        Reader r(std::string_view(reinterpret_cast<const char*>(got->data.get()), got->size));
        value = f.decode(r);
      } catch (const Error& e) {
        return fail(e.code(), e.what());
      }
      resolve_(f.entry, std::move(value), nullptr);
      return;
    }
    if (got.status().code() != kNotReady) {
      if (absl::IsUnavailable(got.status()) && !f.lineage.empty()) {
        return RebuildOne(f, std::string(got.status().message()));
      }
      return fail(static_cast<ErrorCode>(got.status().code()), std::string(got.status().message()));
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (std::chrono::steady_clock::now() >= give_up) break;
      if (cv_.wait_for(lock, backoff, [this] { return stopping_; })) {
        lock.unlock();
        return fail(ErrorCode::kCancelled, "the runtime stopped");
      }
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  fail(ErrorCode::kDeadlineExceeded, "it was still not ready when the collective timeout passed");
}

void ObjectExchange::RebuildOne(Fetch& f, const std::string& why) {
  const ObjectId id = f.entry->id;
  std::exception_ptr failure;
  try {
    detail::ObjectHeader* again = rebuild_(DecodeLineage(f.lineage), id);
    // The result is a value of this process; the import gets a copy through the codec, as if it
    // had been fetched (the rebuilt object is dropped right after).
    std::unique_ptr<detail::ValueBox> value;
    try {
      const detail::ValueBox& box = detail::AwaitValue(again, std::chrono::steady_clock::time_point::max());
      std::string bytes;
      box.EncodeTo(bytes);
      Reader r(bytes);
      value = f.decode(r);
    } catch (...) {
      failure = std::current_exception();
    }
    detail::Release(again);
    if (value != nullptr) {
      resolve_(f.entry, std::move(value), nullptr);
      return;
    }
  } catch (...) {
    failure = std::current_exception();
  }
  resolve_(f.entry, nullptr,
           std::make_exception_ptr(Error(ErrorCode::kUnavailable,
                                         absl::StrCat("object ", id, " was lost with rank ", OwnerOf(id), " (", why,
                                                      ") and running its task again failed: ",
                                                      FailureMessage(failure)))));
}

}  // namespace gpupool::runtime
