#include "runtime/objects/object_exchange.h"

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
#include "transport/fetch_wire.h"
#include "transport/object_transfer.h"
#include "transport/peer_distance.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

namespace {

// What the owner answers while the object's task is still running: the importer asks again.
// kAborted because no other answer uses it (Unavailable means the owner itself failed).
constexpr absl::StatusCode kNotReady = absl::StatusCode::kAborted;

// The SendScope of this thread's current send, if any.
thread_local ObjectExchange::SendScope* current_scope = nullptr;

// The ticket's layout (see ObjectExchange::Ticket): the copies' ranks, the lineage, then the rank
// owed a receipt, in the project's codec; "" when there is none of them.
std::string EncodeTicket(const ObjectExchange::Ticket& t) {
  if (t.copies.empty() && t.lineage.empty() && t.receipt_to < 0) return "";
  std::string out;
  Writer w(out);
  Encode(w, t.copies);
  Encode(w, t.lineage);
  Encode(w, t.receipt_to);
  return out;
}

// Throws gpupool::Error (kDataLoss) for bytes that are not a ticket of a job of `ranks`.
ObjectExchange::Ticket DecodeTicket(std::string_view bytes, int ranks) {
  ObjectExchange::Ticket t;
  if (bytes.empty()) return t;
  Reader r(bytes);
  t.copies = Decode<std::vector<int32_t>>(r);
  t.lineage = Decode<std::string>(r);
  t.receipt_to = Decode<int32_t>(r);
  if (r.remaining() != 0) throw Error(ErrorCode::kDataLoss, "a ref's ticket has trailing bytes");
  for (int32_t rank : t.copies) {
    if (rank < 0 || rank >= ranks) {
      throw Error(ErrorCode::kDataLoss, absl::StrCat("a ref's ticket names rank ", rank, " in a job of ", ranks));
    }
  }
  if (t.receipt_to < -1 || t.receipt_to >= ranks) {
    throw Error(ErrorCode::kDataLoss,
                absl::StrCat("a ref's ticket owes a receipt to rank ", t.receipt_to, " in a job of ", ranks));
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
  // Receipts may arrive as soon as a ref has been sent; a failed rank owes nothing any more.
  transport::UcxWorker& worker = *group.worker();
  for (int r = 0; r < group.size(); ++r) {
    if (r != group.rank()) (void)x->PeerOf(r);  // failing: gone already (done), it will owe nothing
  }
  worker.SetAmHandler(transport::AmId::kObjectReceipt, [raw = x.get()](transport::AmMessage& m) {
    absl::StatusOr<transport::ObjectReceipt> receipt = transport::DecodeObjectReceipt(m.header());
    // Garbage, or a process without the job's key: dropped (it would free what others read).
    if (!receipt.ok() || !transport::SameAccessKey(receipt->access_key, raw->options_.access_key)) return;
    raw->OnReceipt(receipt->rank, receipt->object_id);
  });
  worker.RunInLoop([&worker, raw = x.get()] {  // the listener list is the loop thread's
    raw->failure_listener_ = worker.AddPeerFailureListener(
        [raw](transport::PeerId peer, const absl::Status&) { raw->OnPeerFailed(peer); });
  });
  x->fetch_thread_ = std::thread([raw = x.get()] { raw->FetchLoop(); });
  x->release_thread_ = std::thread([raw = x.get()] { raw->ReleaseLoop(); });
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
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (fetch_thread_.joinable()) fetch_thread_.join();
  if (release_thread_.joinable()) release_thread_.join();
  if (group_.worker() != nullptr) {
    group_.worker()->ClearAmHandler(transport::AmId::kObjectReceipt);
    transport::UcxWorker* worker = group_.worker();
    worker->RunInLoop([worker, handle = failure_listener_] { worker->RemovePeerFailureListener(handle); });
  }
  fetcher_.reset();
  server_.reset();  // waits for replies in flight: nothing reads the bytes below after this
  std::map<ObjectId, Exported> exported;
  std::deque<Fetch> unfetched;
  std::vector<ObjectEntry*> unpinned;
  {
    MutexLock lock(&mu_);
    exported.swap(exported_);
    unfetched.swap(to_fetch_);
    unpinned.swap(to_release_);
  }
  for (ObjectEntry* e : unpinned) detail::Release(e);
  for (Fetch& f : unfetched) {
    resolve_(f.entry, nullptr,
             std::make_exception_ptr(Error(ErrorCode::kCancelled, "the runtime stopped before the object was fetched")));
    detail::Release(f.entry);
  }
  for (auto& [id, e] : exported) detail::Release(e.entry);
}

ObjectExchange::SendScope::SendScope(ObjectExchange& exchange, std::vector<int> receivers)
    : exchange_(exchange), outer_(current_scope) {
  for (int r : receivers) {
    if (r != exchange.group_.rank() && r >= 0 && r < exchange.group_.size()) receivers_.push_back(r);
  }
  current_scope = this;
}

ObjectExchange::SendScope::~SendScope() {
  current_scope = outer_;
  if (leaving_ || counted_.empty()) return;
  // Nothing was sent (encoding failed): nobody will send a receipt for these. Once sending has
  // begun the counts stay even if it fails (some receivers may have the bytes): a receiver that
  // failed is dropped by OnPeerFailed, so this errs towards keeping, never towards freeing early.
  MutexLock lock(&exchange_.mu_);
  for (ObjectId id : counted_) {
    auto it = exchange_.exported_.find(id);
    if (it == exchange_.exported_.end()) continue;
    for (int r : receivers_) {
      if (auto owed = it->second.owed.find(r); owed != it->second.owed.end() && --owed->second <= 0) {
        it->second.owed.erase(owed);
      }
    }
    exchange_.UnpinIfDone(it);
  }
  exchange_.cv_.NotifyAll();
}

std::string ObjectExchange::Export(ObjectEntry* entry) {
  if (group_.worker() == nullptr) return "";  // nobody to serve
  SendScope* scope = CurrentScope();
  Ticket t;
  t.receipt_to = scope != nullptr && !scope->receivers_.empty() ? group_.rank() : -1;
  if (OwnerOf(entry->id) != group_.rank()) {
    // A copy this rank imported, sent on: it travels with what it came with, and this rank keeps
    // and serves its copy too, ready or not (a reader asks again while this rank's own fetch
    // runs), so a reader can fall back on it when the owner is gone or has freed the object.
    MutexLock lock(&mu_);
    if (auto origin = origins_.find(entry->id); origin != origins_.end()) {
      t.copies = origin->second.copies;
      t.lineage = origin->second.lineage;
    }
    ServeLocked(entry);
    if (std::find(t.copies.begin(), t.copies.end(), group_.rank()) == t.copies.end()) {
      t.copies.push_back(group_.rank());
    }
    return EncodeTicket(t);
  }
  {
    MutexLock lock(&mu_);
    ServeLocked(entry);
  }
  // The producing task is known while the object is pending (the store clears it, under the
  // entry's lock, before the task is deleted).
  MutexLock lock(&entry->mu);
  if (entry->producer != nullptr && options_.lineage_of) {
    if (std::optional<Lineage> lineage = options_.lineage_of(*entry->producer)) {
      t.lineage = EncodeLineage(*lineage);
    }
  }
  return EncodeTicket(t);
}

ObjectExchange::SendScope* ObjectExchange::CurrentScope() const {
  return current_scope != nullptr && &current_scope->exchange_ == this ? current_scope : nullptr;
}

void ObjectExchange::ServeLocked(ObjectEntry* entry) {
  SendScope* scope = CurrentScope();
  if (scope != nullptr && scope->receivers_.empty()) return;  // sent to this rank only: nobody reads it
  auto [it, inserted] = exported_.try_emplace(entry->id, Exported{entry, nullptr, {}, false});
  if (inserted) detail::Retain(entry);
  if (scope == nullptr) {
    it->second.for_good = true;
    return;
  }
  for (int r : scope->receivers_) OweLocked(it->second, r);
  scope->counted_.push_back(entry->id);
}

void ObjectExchange::OweLocked(Exported& e, int rank) {
  if (dead_.count(rank) == 0) ++e.owed[rank];  // a failed rank will never pay
}

void ObjectExchange::UnpinIfDone(std::map<ObjectId, Exported>::iterator it) {
  if (it->second.for_good || !it->second.owed.empty()) return;
  to_release_.push_back(it->second.entry);
  exported_.erase(it);
}

void ObjectExchange::OnReceipt(int from, ObjectId id) {
  MutexLock lock(&mu_);
  auto it = exported_.find(id);
  if (it == exported_.end()) return;  // a duplicate, or a scope taken back: nothing is owed
  auto owed = it->second.owed.find(from);
  if (owed == it->second.owed.end()) return;
  if (--owed->second <= 0) it->second.owed.erase(owed);
  UnpinIfDone(it);
  cv_.NotifyAll();
}

absl::StatusOr<transport::PeerId> ObjectExchange::PeerOf(int rank) {
  absl::StatusOr<transport::PeerId> peer = group_.worker()->Connect(group_.address(rank), absl::StrCat("rank ", rank));
  if (peer.ok()) {
    MutexLock lock(&mu_);
    rank_of_peer_[*peer] = rank;
  }
  return peer;
}

void ObjectExchange::OnPeerFailed(transport::PeerId peer) {
  // A peer the transport gave up on (dead, or too slow for a deadline) is taken for dead: what it
  // owes is dropped, and no receipt is sent to it any more. For a rank that was only slow this
  // errs: an object it still had to fetch may be freed (its fetch then tries copies and lineage),
  // and what it sends this rank is kept until its runtime stops.
  MutexLock lock(&mu_);
  auto rank = rank_of_peer_.find(peer);
  if (rank == rank_of_peer_.end()) return;
  const int r = rank->second;
  dead_.insert(r);
  for (auto it = exported_.begin(); it != exported_.end();) {
    auto next = std::next(it);
    if (it->second.owed.erase(r) > 0) UnpinIfDone(it);
    it = next;
  }
  cv_.NotifyAll();
}

void ObjectExchange::SendReceipt(int to, ObjectId id) {
  if (to < 0 || group_.worker() == nullptr) return;
  if (to == group_.rank()) return OnReceipt(to, id);
  {
    MutexLock lock(&mu_);
    if (dead_.count(to) != 0) return;  // it keeps nothing for this rank any more
  }
  absl::StatusOr<transport::PeerId> peer = PeerOf(to);
  if (!peer.ok()) return;  // likewise
  std::string header = transport::EncodeObjectReceipt(
      transport::ObjectReceipt{options_.access_key, static_cast<int32_t>(group_.rank()), id});
  transport::UcxWorker* worker = group_.worker();
  worker->Post([worker, peer = *peer, header = std::move(header)]() mutable {
    worker->SendAm(peer, transport::AmId::kObjectReceipt, std::move(header), nullptr, 0, false,
                   [](absl::Status) {});  // a failed peer keeps nothing for this rank
  });
}

ObjectExchange::Ticket ObjectExchange::TicketOf(ObjectId id, std::string_view ticket) const {
  try {
    return DecodeTicket(ticket, group_.size());
  } catch (const Error& e) {
    throw Error(e.code(), absl::StrCat("object ", id, ": ", e.what()));
  }
}

void ObjectExchange::ReturnedHome(ObjectId id, const std::string& ticket) {
  if (group_.worker() == nullptr) return;
  SendReceipt(TicketOf(id, ticket).receipt_to, id);
}

void ObjectExchange::ReleaseLoop() {
  MutexLock lock(&mu_);
  while (true) {
    cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !to_release_.empty(); });
    if (stopping_) return;  // the destructor releases what is left
    std::vector<ObjectEntry*> batch;
    batch.swap(to_release_);
    lock.Unlock();
    for (ObjectEntry* e : batch) detail::Release(e);
    lock.Lock();
  }
}

ObjectEntry* ObjectExchange::Import(ObjectId id, detail::BoxDecoder decode, std::string ticket) {
  const int owner = OwnerOf(id);
  if (group_.worker() == nullptr || owner >= group_.size()) {
    throw Error(ErrorCode::kNotFound,
                absl::StrCat("object ", id, " belongs to rank ", owner, ", which this job (", group_.size(),
                             " rank(s)) does not have"));
  }
  Ticket t = TicketOf(id, ticket);
  MutexLock lock(&mu_);
  if (ObjectEntry* live = store_.Lookup(id)) {  // imported already, still referenced
    lock.Unlock();
    SendReceipt(t.receipt_to, id);
    return live;
  }
  if (stopping_) throw Error(ErrorCode::kCancelled, "the runtime is stopping");
  // Origins of copies that were freed since are forgotten here, a few at a time.
  for (int sweep = 0; sweep < 4 && !origins_.empty(); ++sweep) {
    auto it = origins_.upper_bound(sweep_from_);
    if (it == origins_.end()) it = origins_.begin();
    sweep_from_ = it->first;
    // Holds, not Lookup: a lookup retains, and this sweep kept every live copy it met alive for
    // good (found by the object-lifetime check of mpi_collectives_test).
    if (!store_.Holds(it->first)) origins_.erase(it);
  }
  ObjectEntry* entry = store_.CreatePendingWithId(id);
  detail::Retain(entry);  // the fetch's count
  origins_[id] = Ticket{t.copies, t.lineage, -1};
  to_fetch_.push_back(Fetch{entry, decode, std::move(t)});
  cv_.NotifyAll();
  return entry;
}

absl::StatusOr<transport::ServedObject> ObjectExchange::Lookup(absl::string_view text) {
  // "<id>/<rank>": the object, and the rank fetching it, which owes a receipt for each ref inside
  // the value ("<id>" alone: a fetcher that sends none; those refs are then kept for good).
  ObjectId id = 0;
  int requester = -1;
  const size_t slash = text.find('/');
  if (!absl::SimpleAtoi(text.substr(0, slash), &id) ||
      (slash != absl::string_view::npos &&
       (!absl::SimpleAtoi(text.substr(slash + 1), &requester) || requester < 0 || requester >= group_.size() ||
        requester == group_.rank()))) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not an object id (and a rank of this job)"));
  }
  MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<const std::string>> bytes = ServedBytes(id, requester);
  if (!bytes.ok()) return bytes.status();
  // The transfer holds the bytes: the object may be unpinned while they are on their way.
  return transport::ServedObject{
      absl::MakeConstSpan(reinterpret_cast<const std::byte*>((*bytes)->data()), (*bytes)->size()),
      [held = *bytes]() {}};
}

absl::StatusOr<std::shared_ptr<const std::string>> ObjectExchange::ServedBytes(ObjectId id, int requester) {
  auto it = exported_.find(id);
  if (it == exported_.end()) {
    return absl::NotFoundError(
        absl::StrCat("rank ", group_.rank(), " does not keep object ", id, " (never sent from it, or freed since)"));
  }
  Exported& e = it->second;
  switch (e.entry->state.load(std::memory_order_acquire)) {
    case detail::kObjectPending:
      return absl::Status(kNotReady, absl::StrCat("object ", id, " is not ready yet"));
    case detail::kObjectFailed:
      if (OwnerOf(id) != group_.rank()) {
        // This rank's copy: another source may still serve it, so it is not final.
        return absl::NotFoundError(absl::StrCat("rank ", group_.rank(), "'s copy of object ", id,
                                                " could not be had either: ", FailureMessage(e.entry->failure)));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("object ", id, " failed on rank ", group_.rank(), ": ", FailureMessage(e.entry->failure)));
    default:
      break;
  }
  if (e.bytes != nullptr) {
    // Encoded for an earlier fetcher: this one owes receipts for the refs inside too.
    if (requester >= 0) {
      for (ObjectId nested : e.nested) {
        auto n = exported_.find(nested);
        if (n == exported_.end()) {
          // Unpinned since; alive still, as the value holds a ref to it. Lookup retains: the pin.
          ObjectEntry* live = store_.Lookup(nested);
          if (live == nullptr) continue;
          n = exported_.emplace(nested, Exported{live, nullptr, {}, false}).first;
        }
        OweLocked(n->second, requester);
      }
    }
    return e.bytes;
  }
  // Encoded without mu_: refs inside the value are exported as it encodes (Export takes mu_),
  // owed receipts by the fetcher, as if it had been sent them.
  ObjectEntry* entry = e.entry;
  detail::Retain(entry);
  mu_.Unlock();
  auto encoded = std::make_shared<std::string>();
  std::vector<ObjectId> nested;
  absl::Status st;
  {
    std::optional<SendScope> scope;
    if (requester >= 0) scope.emplace(*this, std::vector<int>{requester});
    try {
      entry->value->EncodeTo(*encoded);
      if (scope.has_value()) {
        scope->Leaving();
        nested = scope->counted_;
      }
    } catch (const std::exception& ex) {
      st = absl::UnimplementedError(absl::StrCat("object ", id, " cannot be sent: ", ex.what()));
    } catch (...) {  // never into the UCX loop
      st = absl::UnimplementedError(absl::StrCat("object ", id, " cannot be sent: a non-standard exception"));
    }
  }
  mu_.Lock();
  to_release_.push_back(entry);  // dropped off this (the loop) thread
  cv_.NotifyAll();
  if (!st.ok()) return st;
  if (auto again = exported_.find(id); again != exported_.end() && again->second.bytes == nullptr) {
    again->second.bytes = encoded;
    again->second.nested = std::move(nested);
  }
  return std::shared_ptr<const std::string>(std::move(encoded));
}

void ObjectExchange::FetchLoop() {
  MutexLock lock(&mu_);
  while (true) {
    cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !to_fetch_.empty(); });
    if (stopping_) return;
    Fetch f = to_fetch_.front();
    to_fetch_.pop_front();
    lock.Unlock();
    FetchOne(f);
    const ObjectId id = f.entry->id;
    detail::Release(f.entry);
    SendReceipt(f.ticket.receipt_to, id);  // resolved, whichever way: the sender may let go
    lock.Lock();
  }
}

void ObjectExchange::FetchOne(Fetch& f) {
  const ObjectId id = f.entry->id;
  const int owner = OwnerOf(id);
  // The nearest source first (same host, then same rack: transport/peer_distance.h), the owner
  // before copies as near as it; a source that cannot be reached (dead, or dying mid-transfer)
  // sends the fetch on to the next.
  // The owner is this rank for a ref that came home after this rank freed the object: only the
  // copies can serve it then.
  std::vector<int> sources;
  if (owner != group_.rank()) sources.push_back(owner);
  for (int r : f.ticket.copies) {
    if (r != group_.rank() && std::find(sources.begin(), sources.end(), r) == sources.end()) sources.push_back(r);
  }
  sources = transport::NearestFirst(group_.places(), group_.rank(), std::move(sources));
  if (sources.empty()) {
    resolve_(f.entry, nullptr,
             std::make_exception_ptr(Error(ErrorCode::kNotFound,
                                           absl::StrCat("object ", id, " was freed on rank ", owner,
                                                        " (this rank, its owner) when its last reference went "
                                                        "away, and no other rank kept a copy"))));
    return;
  }
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
    // A source that no longer keeps it (freed once its receipts came in) is not final either.
    const bool next = absl::IsUnavailable(st) || absl::IsNotFound(st) || (absl::IsDeadlineExceeded(st) && source != owner);
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
  absl::StatusOr<transport::PeerId> peer = PeerOf(source);
  if (!peer.ok()) return peer.status();
  const auto give_up = std::chrono::steady_clock::now() + absl::ToChronoSeconds(options_.patience);
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    // This rank's number goes with the id: it owes receipts for the refs inside (see Lookup).
    absl::StatusOr<transport::FetchedObject> got = fetcher_->Fetch(*peer, absl::StrCat(id, "/", group_.rank()));
    if (got.ok()) {
      std::unique_ptr<detail::ValueBox> value;
      try {
        Reader r(std::string_view(reinterpret_cast<const char*>(got->data.get()), got->size));
        value = f.decode(r);
      } catch (const Error& e) {
        // The bytes came: whatever decoding says is final, not "this source lacks it" (a nested
        // ref's NotFound must not send the fetch on to the next source).
        const auto code = static_cast<absl::StatusCode>(e.code());
        return absl::Status(code == absl::StatusCode::kNotFound || code == absl::StatusCode::kUnavailable
                                ? absl::StatusCode::kFailedPrecondition
                                : code,
                            e.what());
      }
      resolve_(f.entry, std::move(value), nullptr);
      return absl::OkStatus();
    }
    if (got.status().code() != kNotReady) return got.status();
    {
      MutexLock lock(&mu_);
      if (std::chrono::steady_clock::now() >= give_up) break;
      if (cv_.WaitFor(&mu_, backoff, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; })) {
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
      auto* entry = static_cast<ObjectEntry*>(again);
      const detail::ValueBox& box = entry->store->Await(entry, std::chrono::steady_clock::time_point::max());
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
