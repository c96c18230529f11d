#include "runtime/job/object_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "runtime/tasks/task.h"
#include "transport/object_transfer.h"
#include "transport/peer_distance.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

namespace {

// What the owner answers while the object's task is still running: the importer asks again.
// kAborted because no other answer uses it (Unavailable means the owner itself failed).
constexpr absl::StatusCode kNotReady = absl::StatusCode::kAborted;

// The ticket's layout (see ObjectExchange::Ticket): the copies' ranks, then the lineage, in the
// project's codec; "" when there is neither, so a plain value's ref stays two bytes longer at most.
std::string EncodeTicket(const ObjectExchange::Ticket& t) {
  if (t.copies.empty() && t.lineage.empty()) return "";
  std::string out;
  Writer w(out);
  Encode(w, t.copies);
  Encode(w, t.lineage);
  return out;
}

// Throws gpupool::Error (kDataLoss) for bytes that are not a ticket of a job of `ranks`.
ObjectExchange::Ticket DecodeTicket(std::string_view bytes, int ranks) {
  ObjectExchange::Ticket t;
  if (bytes.empty()) return t;
  Reader r(bytes);
  t.copies = Decode<std::vector<int32_t>>(r);
  t.lineage = Decode<std::string>(r);
  if (r.remaining() != 0) throw Error(ErrorCode::kDataLoss, "a ref's ticket has trailing bytes");
  for (int32_t rank : t.copies) {
    if (rank < 0 || rank >= ranks) {
      throw Error(ErrorCode::kDataLoss, absl::StrCat("a ref's ticket names rank ", rank, " in a job of ", ranks));
    }
  }
  return t;
}

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
                                                                       Options options) {
  std::unique_ptr<ObjectExchange> x(
      new ObjectExchange(group, store, std::move(resolve), std::move(rebuild), std::move(options)));
  if (group.worker() == nullptr) return x;  // a job of one process
  // The server first: peers may fetch as soon as a ref has been sent.
  absl::StatusOr<std::unique_ptr<transport::ObjectServer>> server = transport::ObjectServer::Start(
      *group.worker(), [raw = x.get()](absl::string_view id) { return raw->Lookup(id); }, x->options_.access_key);
  if (!server.ok()) return server.status();
  x->server_ = *std::move(server);
  absl::StatusOr<std::unique_ptr<transport::ObjectFetcher>> fetcher =
      transport::ObjectFetcher::Create(*group.worker(), x->options_.access_key);
  if (!fetcher.ok()) return fetcher.status();
  x->fetcher_ = *std::move(fetcher);
  x->fetch_thread_ = std::thread([raw = x.get()] { raw->FetchLoop(); });
  return x;
}

ObjectExchange::ObjectExchange(JobGroup& group, ObjectStore& store, Resolve resolve, Rebuild rebuild,
                               Options options)
    : group_(group),
      store_(store),
      resolve_(std::move(resolve)),
      rebuild_(std::move(rebuild)),
      options_(std::move(options)) {}

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
  if (OwnerOf(entry->id) != group_.rank()) {
    // A copy this rank imported, sent on: it travels with what it came with, and once fetched
    // this rank serves it too, so a reader can fall back on it when the owner is gone.
    std::lock_guard<std::mutex> lock(mu_);
    Ticket t;
    if (auto origin = origins_.find(entry->id); origin != origins_.end()) t = origin->second;
    if (entry->state.load(std::memory_order_acquire) == detail::kObjectReady) {
      ServeLocked(entry);
      if (std::find(t.copies.begin(), t.copies.end(), group_.rank()) == t.copies.end()) {
        t.copies.push_back(group_.rank());
      }
    }
    return EncodeTicket(t);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ServeLocked(entry);
  }
  // The producing task is known while the object is pending (the store clears it, under the
  // entry's lock, before the task is deleted).
  std::lock_guard<std::mutex> lock(entry->mu);
  const Task* producer = entry->producer;
  if (producer == nullptr || !producer->deps.empty() || !producer->nested.empty()) return "";
  return EncodeTicket(Ticket{{}, EncodeLineage(Lineage{producer->function->name, producer->args,
                                                       producer->shape->options,
                                                       CheckpointKey(options_.job_id, producer->id)})});
}

void ObjectExchange::ServeLocked(ObjectEntry* entry) {
  auto [it, inserted] = exported_.try_emplace(entry->id, Exported{entry, {}, false});
  if (inserted) detail::Retain(entry);
}

ObjectEntry* ObjectExchange::Import(ObjectId id, detail::BoxDecoder decode, std::string ticket) {
  const int owner = OwnerOf(id);
  if (group_.worker() == nullptr || owner >= group_.size()) {
    throw Error(ErrorCode::kNotFound,
                absl::StrCat("object ", id, " belongs to rank ", owner, ", which this job (", group_.size(),
                             " rank(s)) does not have"));
  }
  Ticket t;
  try {
    t = DecodeTicket(ticket, group_.size());
  } catch (const Error& e) {
    throw Error(e.code(), absl::StrCat("object ", id, ": ", e.what()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ObjectEntry* live = store_.Lookup(id)) return live;  // imported already, still referenced
  if (stopping_) throw Error(ErrorCode::kCancelled, "the runtime is stopping");
  // Origins of copies that were freed since are forgotten here, a few at a time.
  for (int sweep = 0; sweep < 4 && !origins_.empty(); ++sweep) {
    auto it = origins_.upper_bound(sweep_from_);
    if (it == origins_.end()) it = origins_.begin();
    sweep_from_ = it->first;
    if (store_.Lookup(it->first) == nullptr) origins_.erase(it);
  }
  ObjectEntry* entry = store_.CreatePendingWithId(id);
  detail::Retain(entry);  // the fetch's count
  origins_[id] = t;
  to_fetch_.push_back(Fetch{entry, decode, std::move(t)});
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
  // The nearest source first (same host, then same rack: transport/peer_distance.h), the owner
  // before copies as near as it; a source that cannot be reached (dead, or dying mid-transfer)
  // sends the fetch on to the next.
  std::vector<int> sources{owner};
  for (int r : f.ticket.copies) {
    if (r != group_.rank() && std::find(sources.begin(), sources.end(), r) == sources.end()) sources.push_back(r);
  }
  sources = transport::NearestFirst(group_.places(), group_.rank(), std::move(sources));
  std::string unreachable;  // why each source failed, for the final message
  for (int source : sources) {
    absl::Status st = FetchFrom(f, source);
    if (st.ok()) return;
    if (sources.size() == 1) {
      unreachable = std::string(st.message());
    } else {
      absl::StrAppend(&unreachable, unreachable.empty() ? "" : "; ", "rank ", source, ": ", st.message());
    }
    // Unreachable, or a copy too slow to answer: the next source may serve it (a nearer copy is
    // tried before the owner, so its timeout must not end the fetch). Other errors, and the
    // owner's own timeout (its object not ready in time), are final.
    const bool next = absl::IsUnavailable(st) || (absl::IsDeadlineExceeded(st) && source != owner);
    if (!next) {
      resolve_(f.entry, nullptr,
               std::make_exception_ptr(Error(static_cast<ErrorCode>(st.code()),
                                             absl::StrCat("object ", id, " could not be fetched from rank ", source,
                                                          ": ", st.message()))));
      return;
    }
  }
  if (!f.ticket.lineage.empty()) return RebuildOne(f, unreachable);
  resolve_(f.entry, nullptr,
           std::make_exception_ptr(Error(ErrorCode::kUnavailable,
                                         absl::StrCat("object ", id, " could not be fetched from rank ", owner,
                                                      sources.size() > 1 ? " nor from its copies" : "", ": ",
                                                      unreachable))));
}

absl::Status ObjectExchange::FetchFrom(Fetch& f, int source) {
  const ObjectId id = f.entry->id;
  absl::StatusOr<transport::PeerId> peer = group_.worker()->Connect(group_.address(source), absl::StrCat("rank ", source));
  if (!peer.ok()) return peer.status();
  const auto give_up = std::chrono::steady_clock::now() + absl::ToChronoSeconds(options_.patience);
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    absl::StatusOr<transport::FetchedObject> got = fetcher_->Fetch(*peer, absl::StrCat(id));
    if (got.ok()) {
      std::unique_ptr<detail::ValueBox> value;
      try {
        Reader r(std::string_view(reinterpret_cast<const char*>(got->data.get()), got->size));
        value = f.decode(r);
      } catch (const Error& e) {
        return absl::Status(static_cast<absl::StatusCode>(e.code()), e.what());
      }
      resolve_(f.entry, std::move(value), nullptr);
      return absl::OkStatus();
    }
    if (got.status().code() != kNotReady) return got.status();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (std::chrono::steady_clock::now() >= give_up) break;
      if (cv_.wait_for(lock, backoff, [this] { return stopping_; })) {
        return absl::CancelledError("the runtime stopped");
      }
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  return absl::DeadlineExceededError("it was still not ready when the collective timeout passed");
}

void ObjectExchange::RebuildOne(Fetch& f, const std::string& why) {
  const ObjectId id = f.entry->id;
  std::exception_ptr failure;
  try {
    detail::ObjectHeader* again = rebuild_(DecodeLineage(f.ticket.lineage), id);
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
