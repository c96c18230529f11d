// File: runtime/tasks/remote_objects.cc
#include "runtime/tasks/remote_objects.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "runtime/tasks/task.h"

namespace gpupool::runtime {
namespace {

thread_local RemoteObjects::DecodingFrom* decoding = nullptr;

bool MadeBy(const WorkerConnection& worker, ObjectId id) {
  return id >= worker.object_id_base() && id - worker.object_id_base() < wire::kWorkerIdSpan;
}

}  // namespace

RemoteObjects::DecodingFrom::DecodingFrom(WorkerConnection* from) : from_(from), previous_(decoding) { decoding = this; }
RemoteObjects::DecodingFrom::~DecodingFrom() { decoding = previous_; }

void RemoteObjects::SendRelease(WorkerConnection& to, uint64_t object, uint64_t count, bool read,
                                uint64_t refs_read) {
  if (count == 0) return;
  to.PostFrame(wire::Encode(wire::Release{.object = object, .count = count, .read = read, .refs_read = refs_read}));
}

void RemoteObjects::DropLineage::operator()(Task* task) const {
  counter->fetch_sub(bytes, std::memory_order_relaxed);
  // Freeing a task releases its inputs, which may free their records and so their own lineages:
  // a chain as long as the budget allows. Those are freed by the outermost call's loop, not by
  // recursion as deep as the chain.
  static thread_local std::vector<Task*>* freeing = nullptr;
  if (freeing != nullptr) {
    freeing->push_back(task);
    return;
  }
  std::vector<Task*> tasks{task};
  freeing = &tasks;
  absl::Cleanup done = [] { freeing = nullptr; };
  while (!tasks.empty()) {
    Task* next = tasks.back();
    tasks.pop_back();
    DeleteTaskReleasingInputs(next);
  }
}

bool RemoteObjects::KeepLineage(Task* task) {
  MutexLock lock(&mu_);
  auto it = records_.find(task->result);
  if (it == records_.end() || !it->second.result || it->second.lineage != nullptr) return false;
  // What keeping it pins: the task and its arguments, and the values workers keep for its inputs
  // (they stay while it may need them again). Values this driver holds count as nothing here.
  uint64_t bytes = sizeof(Task) + task->args.size();
  for (const auto* inputs : {&task->deps, &task->nested}) {
    for (detail::ObjectHeader* h : *inputs) {
      if (auto input = records_.find(static_cast<ObjectEntry*>(h)); input != records_.end()) bytes += input->second.bytes;
    }
  }
  if (lineage_bytes_.load(std::memory_order_relaxed) + bytes > kLineageBudgetBytes) return false;
  lineage_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  it->second.lineage = KeptTask(task, DropLineage{&lineage_bytes_, bytes});
  return true;
}

std::exception_ptr RemoteObjects::LostWith(const Record& record, const WorkerConnection& gone, const absl::Status& why) {
  return std::make_exception_ptr(
      Error(ErrorCode::kDataLoss, absl::StrCat(record.what, " is lost: only worker pid ", gone.pid(), " on node ",
                                               gone.node(), " kept it, and it is gone (", why.message(), ")")));
}

void RemoteObjects::Add(ObjectEntry* entry, Record record) {
  const std::shared_ptr<WorkerConnection> worker = record.worker;
  bool lost;
  {
    MutexLock lock(&mu_);
    lost = !Insert(entry, std::move(record));
  }
  if (lost) FailLost(entry, *worker);
  else Mark(entry);
}

bool RemoteObjects::Insert(ObjectEntry* entry, Record record) {
  // Met in a value read after its worker went (fetched over UCX, read meanwhile): lost now.
  if (gone_.contains(record.worker.get())) return false;
  records_[entry] = std::move(record);
  return true;
}

void RemoteObjects::FailLost(ObjectEntry* entry, const WorkerConnection& gone) {
  Record what{.what = absl::StrCat("object ", entry->id)};
  std::vector<Task*> waiting = store_.Fail(entry, LostWith(what, gone, absl::UnavailableError("its connection ended")));
  for (Task* t : waiting) resolved_(t, entry);
}

bool RemoteObjects::TakeRecord(ObjectEntry* entry, Record* out) {
  auto it = records_.find(entry);
  if (it == records_.end()) return false;
  *out = std::move(it->second);
  records_.erase(it);
  return true;
}

void RemoteObjects::Mark(ObjectEntry* entry) {
  bool wanted = false;
  std::vector<Task*> made;
  // Recorded before the mark, so a Want that sees the mark finds the record.
  if (!store_.MarkRemote(entry, &wanted, &made)) {
    Record gone;
    {
      MutexLock lock(&mu_);
      // OnLost took it meanwhile (its worker went while a UCX fetch's value was read): settled there.
      if (!TakeRecord(entry, &gone)) return;
    }
    SendRelease(*gone.worker, gone.worker_id, gone.holds);
    return;
  }
  for (Task* t : made) resolved_(t, entry);
  if (wanted) Want(entry);
}

bool RemoteObjects::HoldResult(ObjectEntry* result, WorkerConnection& from, uint64_t held, detail::BoxDecoder decode,
                               std::string what, bool own_refs, uint64_t bytes) {
  Add(result, Record{.worker = from.shared_from_this(),
                     .worker_id = held,
                     .decode = decode,
                     .holds = 1,
                     .result = true,
                     .own_refs = own_refs,
                     .bytes = bytes,
                     .what = std::move(what)});
  return result->remote.load(std::memory_order_acquire);
}

detail::ObjectHeader* RemoteObjects::Import(ObjectId id, detail::BoxDecoder decode) {
  WorkerConnection* from = decoding != nullptr ? decoding->from() : nullptr;
  const bool theirs = from != nullptr && MadeBy(*from, id);
  if (theirs) ++decoding->refs_read;  // one of the holds it counted, taken here either way
  ObjectEntry* entry = nullptr;
  bool owed = false;   // the worker's hold goes back at once: the driver has the value
  bool fresh = false;  // a new pending entry, recorded
  bool lost = false;   // a new entry for a worker already gone
  {
    // The lookup and the new entry under one lock: two threads reading refs to one object (a
    // worker's reader, and the thread reading a UCX fetch) make one entry for it, not two.
    MutexLock lock(&mu_);
    if (ObjectEntry* live = store_.Lookup(id)) {
      entry = live;
      if (theirs) {
        auto it = records_.find(live);
        if (it != records_.end() && it->second.worker.get() == from) ++it->second.holds;  // joins the record's
        else owed = true;
      }
    } else if (theirs) {
      entry = store_.CreatePendingWithId(id);
      fresh = Insert(entry, Record{.worker = from->shared_from_this(),
                                   .worker_id = id,
                                   .decode = decode,
                                   .holds = 1,
                                   .what = absl::StrCat("object ", id, ", made by worker pid ", from->pid(), " on node ",
                                                        from->node())});
      lost = !fresh;
    }
  }
  if (owed) SendRelease(*from, id, 1);
  if (entry == nullptr) {
    throw Error(ErrorCode::kNotFound,
                absl::StrCat("object ", id, ", which a worker of this job made, is no longer held here: every ref "
                             "to it was dropped, or its worker is gone"));
  }
  if (lost) FailLost(entry, *from);
  else if (fresh) Mark(entry);
  return entry;
}

void RemoteObjects::Want(ObjectEntry* entry) {
  std::shared_ptr<WorkerConnection> worker;
  uint64_t id;
  uint64_t request;
  {
    MutexLock lock(&mu_);
    auto it = records_.find(entry);
    if (it == records_.end() || it->second.request != 0) return;
    // A request of its own: an answer meets the record that asked, never another entry's for the
    // same object (one freed meanwhile, whose answer is still read as an orphan's).
    request = it->second.request = ++last_request_;
    worker = it->second.worker;
    id = it->second.worker_id;
    asked_[{worker.get(), request}] = entry;
    auto peer = peers_.find(worker.get());
    if (it->second.result && fetcher_ != nullptr && peer != peers_.end()) {
      // A kept result's bytes over UCX, straight into a buffer of their size. (Under mu_: the
      // fetch only posts to UCX's thread, and UseUcx clears the fetcher under it.)
      fetcher_->FetchAsync(
          // (A worker that dies ends it sooner: OnLost fails its peer.)
          peer->second, std::to_string(id), transport::kWholeObjectFetch,
          [self = shared_from_this(), worker, request](absl::StatusOr<transport::FetchedObject> got) mutable {
            // Off UCX's thread: reading it may run a user's codec and settle tasks.
            auto fetched = std::make_shared<absl::StatusOr<transport::FetchedObject>>(std::move(got));
            RemoteObjects* raw = self.get();  // decode_ is stopped before the driver lets go of it
            raw->decode_->Post([raw, worker, request, fetched] { raw->OnUcxFetched(worker, request, std::move(*fetched)); });
          });
      return;
    }
  }
  // Posted (this may be the connection's reader): a connection that is going fails the entry in OnLost.
  worker->PostFrame(wire::Encode(wire::Fetch{.request = request, .object = id}));
}

bool RemoteObjects::OnFetched(WorkerConnection& from, const wire::FetchedView& answer, bool over_ucx) {
  Record record;
  ObjectEntry* entry = nullptr;
  {
    MutexLock lock(&mu_);
    const RequestKey key{&from, answer.request};
    if (auto at = asked_.find(key); at != asked_.end()) {
      entry = at->second;
      asked_.erase(at);
      TakeRecord(entry, &record);
      // Taken out, the record is this thread's: a Forget that follows finds nothing, so the
      // entry is touched only when it is still alive.
      if (!ObjectStore::TryRetain(entry)) entry = nullptr;
    } else if (auto orphan = orphans_.find(key); orphan != orphans_.end()) {
      record = std::move(orphan->second);  // its entry was freed after the Fetch went
      orphans_.erase(orphan);
    } else {
      return false;
    }
  }
  // Counted before the entry resolves: whoever waited on it sees the figures that include it.
  bytes_fetched_.fetch_add(answer.value.size(), std::memory_order_relaxed);
  if (over_ucx) fetched_over_ucx_.fetch_add(1, std::memory_order_relaxed);
  std::unique_ptr<detail::ValueBox> value;
  std::exception_ptr failure;
  uint64_t refs_read = 0;
  const std::string where = absl::StrCat(" from worker pid ", from.pid(), " on node ", from.node());
  if (answer.pending) {
    failure = std::make_exception_ptr(Error(ErrorCode::kInternal, absl::StrCat(record.what, ": the worker said it was "
                                                                               "still being computed", where)));
  } else if (answer.code != 0) {
    failure = std::make_exception_ptr(
        Error(static_cast<ErrorCode>(answer.code), absl::StrCat(record.what, where, ": ", answer.message)));
  } else {
    // Read even when nobody here wants it any more: the refs inside are holds the worker counted
    // for this driver, and only reading them (then dropping them) gives those back.
    DecodingFrom scope(&from);
    try {
      Reader r(answer.value);
      value = record.decode(r);
    } catch (const std::exception& e) {  // Error, or whatever a user's codec throws
      failure = std::make_exception_ptr(
          Error(ErrorCode::kDataLoss, absl::StrCat(record.what, " arrived unreadable", where, ": ", e.what())));
      refs_read = scope.refs_read;
    }
  }
  Settle(std::move(record), entry, std::move(value), failure, true, /*read=*/failure == nullptr, refs_read);
  return true;
}

bool RemoteObjects::SettleFrom(ObjectEntry* entry, WorkerConnection& from, std::string_view value) {
  Record record;
  {
    MutexLock lock(&mu_);
    auto it = records_.find(entry);
    if (it == records_.end() || it->second.worker.get() != &from || it->second.request != 0) return false;
    record = std::move(it->second);
    records_.erase(it);
  }
  std::unique_ptr<detail::ValueBox> box;
  try {
    DecodingFrom scope(&from);
    Reader r(value);
    box = record.decode(r);
  } catch (const std::exception&) {  // Error, or a user's codec: left for a fetch to settle
    bool lost;
    {
      MutexLock lock(&mu_);
      lost = gone_.contains(&from);  // its worker went meanwhile, and OnLost did not see the record
      if (!lost) records_[entry] = std::move(record);
    }
    if (lost) FailLost(entry, from);
    return false;
  }
  detail::Retain(entry);  // Settle lets go of one
  Settle(std::move(record), entry, std::move(box), nullptr, /*worker_alive=*/true, /*read=*/true);
  return true;
}

void RemoteObjects::Settle(Record record, ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value,
                           std::exception_ptr failure, bool worker_alive, bool read, uint64_t refs_read) {
  if (worker_alive) SendRelease(*record.worker, record.worker_id, record.holds, read, refs_read);
  if (entry == nullptr) return;
  std::vector<Task*> waiting = failure ? store_.Fail(entry, std::move(failure)) : store_.Complete(entry, std::move(value));
  for (Task* t : waiting) resolved_(t, entry);
  detail::Release(entry);
}

void RemoteObjects::HandOver(WorkerConnection& to, ObjectEntry* result) {
  ObjectEntry* replaced = nullptr;
  {
    MutexLock lock(&mu_);
    if (gone_.contains(&to)) {
      replaced = result;  // nobody will borrow it
    } else {
      ObjectEntry*& slot = handed_[{&to, result->id}];
      replaced = slot;
      slot = result;
    }
  }
  detail::Release(replaced);
}

void RemoteObjects::Lend(WorkerConnection& to, ObjectId id) {
  ObjectEntry* entry = nullptr;
  {
    MutexLock lock(&mu_);
    if (auto handed = handed_.find({&to, id}); handed != handed_.end()) {
      entry = handed->second;  // its reference becomes the loan's, or goes below
      handed_.erase(handed);
    }
  }
  if (entry == nullptr) entry = store_.Lookup(id);
  if (entry == nullptr) return;  // gone already: the worker's read fails, naming it
  {
    MutexLock lock(&mu_);
    auto [it, first] = lent_.try_emplace({&to, id}, entry, 0);
    ++it->second.second;
    if (first) entry = nullptr;  // the lookup's reference is the loan's
  }
  detail::Release(entry);
}

void RemoteObjects::Returned(WorkerConnection& by, const wire::Release& release) {
  ObjectEntry* let_go = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = lent_.find({&by, release.object});
    if (it == lent_.end()) return;
    if (release.count >= it->second.second) {
      let_go = it->second.first;
      lent_.erase(it);
    } else {
      it->second.second -= release.count;
    }
  }
  detail::Release(let_go);  // outside mu_: freeing may come back here (Forget)
}

void RemoteObjects::OnLost(WorkerConnection& gone, const absl::Status& why) {
  std::vector<std::pair<Record, ObjectEntry*>> lost;
  std::vector<ObjectEntry*> returned;
  {
    MutexLock lock(&mu_);
    for (auto it = lent_.lower_bound({&gone, 0}); it != lent_.end() && it->first.first == &gone;) {
      returned.push_back(it->second.first);
      it = lent_.erase(it);
    }
    for (auto it = handed_.lower_bound({&gone, 0}); it != handed_.end() && it->first.first == &gone;) {
      returned.push_back(it->second);
      it = handed_.erase(it);
    }
    for (auto it = orphans_.lower_bound({&gone, 0}); it != orphans_.end() && it->first.first == &gone;) {
      it = orphans_.erase(it);
    }
    for (auto it = asked_.lower_bound({&gone, 0}); it != asked_.end() && it->first.first == &gone;) {
      it = asked_.erase(it);
    }
    if (auto peer = peers_.find(&gone); peer != peers_.end()) {
      // A fetch still receiving from it ends now, not at its deadline (UCX may not notice the
      // peer's death by itself); FailPeer only posts.
      if (ucx_ != nullptr) ucx_->FailPeer(peer->second, why);
      peers_.erase(peer);
    }
    addresses_.erase(&gone);
    gone_.insert(&gone);
    for (auto it = records_.begin(); it != records_.end();) {
      if (it->second.worker.get() != &gone) {
        ++it;
        continue;
      }
      lost.emplace_back(std::move(it->second), ObjectStore::TryRetain(it->first) ? it->first : nullptr);
      records_.erase(it++);
    }
  }
  for (ObjectEntry* entry : returned) detail::Release(entry);
  // Results with a lineage are made again, all at once (see Executor::Rebuild); the rest fail.
  std::vector<std::pair<Task*, ObjectEntry*>> remake;
  std::vector<size_t> remake_at;  // their places in `lost`
  for (size_t i = 0; i < lost.size(); ++i) {
    auto& [record, entry] = lost[i];
    if (record.lineage != nullptr && entry != nullptr && rebuild_) {
      remake.emplace_back(record.lineage.get(), entry);
      remake_at.push_back(i);
    }
  }
  std::vector<bool> remade(lost.size(), false);
  std::vector<std::string> not_remade(lost.size());
  if (!remake.empty()) {
    const std::vector<absl::Status> again = rebuild_(remake);
    for (size_t k = 0; k < remake.size(); ++k) {
      const size_t i = remake_at[k];
      if (!again[k].ok()) {
        not_remade[i] = absl::StrCat("; not made again: ", again[k].message());
        continue;
      }
      // The task is the executor's again, holding the entry (the reference taken above), and may
      // be finished and gone already: let go of it without touching it (what it counted is in
      // its deleter, which the record keeps).
      KeptTask& kept = lost[i].first.lineage;
      lineage_bytes_.fetch_sub(kept.get_deleter().bytes, std::memory_order_relaxed);
      (void)kept.release();
      remade[i] = true;
      rebuilt_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (size_t i = 0; i < lost.size(); ++i) {
    if (remade[i]) continue;
    auto& [record, entry] = lost[i];
    if (not_remade[i].empty() && record.result && entry != nullptr && rebuild_ && record.lineage == nullptr) {
      not_remade[i] = "; not made again: its task was not kept (the lineage this driver keeps was full)";
    }
    std::exception_ptr failure =
        LostWith(record, gone, absl::Status(why.code(), absl::StrCat(why.message(), not_remade[i])));
    Settle(std::move(record), entry, nullptr, failure, false);
  }
}

void RemoteObjects::Forget(ObjectEntry* entry) {
  Record record;
  KeptTask unneeded;  // freed after mu_ is let go (see DropLineage)
  {
    MutexLock lock(&mu_);
    if (!TakeRecord(entry, &record)) return;
    unneeded = std::move(record.lineage);
    if (record.request != 0) {
      // Its answer is on the way: it is read when it comes (OnFetched), and the holds go back then.
      const RequestKey key{record.worker.get(), record.request};
      asked_.erase(key);
      orphans_.emplace(key, std::move(record));
      return;
    }
  }
  SendRelease(*record.worker, record.worker_id, record.holds);
}


void RemoteObjects::OnUcxFetched(const std::shared_ptr<WorkerConnection>& from, uint64_t request,
                                 absl::StatusOr<transport::FetchedObject> got) {
  if (got.ok()) {
    wire::FetchedView answer{.request = request,
                             .value = std::string_view(reinterpret_cast<const char*>(got->data.get()), got->size)};
    (void)OnFetched(*from, answer, /*over_ucx=*/true);
    return;
  }
  // Asked again over the connection (a worker that died fails the record there, in OnLost); a
  // UCX path that failed (not a refusal of one object) is not tried again for that worker.
  uint64_t id = 0;
  {
    MutexLock lock(&mu_);
    if (transport::OwnerUnreachable(got.status())) {
      peers_.erase(from.get());
      addresses_.erase(from.get());  // nor told to other workers
    }
    const RequestKey key{from.get(), request};
    if (auto at = asked_.find(key); at != asked_.end()) {
      auto record = records_.find(at->second);
      if (record == records_.end()) return;
      id = record->second.worker_id;
    } else if (auto orphan = orphans_.find(key); orphan != orphans_.end()) {
      id = orphan->second.worker_id;
    } else {
      return;
    }
  }
  from->PostFrame(wire::Encode(wire::Fetch{.request = request, .object = id}));
}

void RemoteObjects::UseUcx(transport::UcxWorker* ucx, transport::ObjectFetcher* fetcher) {
  {
    MutexLock lock(&mu_);
    // Before the fetcher is seen: a fetch's callback posts to it.
    if (fetcher != nullptr && decode_ == nullptr) decode_ = std::make_unique<CallbackThread>();
    ucx_ = ucx;
    fetcher_ = fetcher;
    if (ucx == nullptr) {
      peers_.clear();
      addresses_.clear();
    }
  }
  // What it has not read is dropped (its records are settled).
  if (ucx == nullptr && decode_ != nullptr) decode_->Stop();
}

void RemoteObjects::ObjectsAt(WorkerConnection& worker, const std::string& ucx_address) {
  transport::UcxWorker* ucx;
  {
    MutexLock lock(&mu_);
    ucx = ucx_;
  }
  if (ucx == nullptr) return;  // this driver has no UCX: fetched over the connection
  // Not under mu_: Connect waits for UCX's thread, which must not wait for mu_ meanwhile.
  absl::StatusOr<transport::PeerId> peer =
      ucx->Connect(ucx_address, absl::StrCat("worker pid ", worker.pid(), " on node ", worker.node()));
  if (!peer.ok()) return;  // fetched over the connection
  MutexLock lock(&mu_);
  if (ucx_ != ucx || gone_.contains(&worker)) return;
  peers_[&worker] = *peer;
  addresses_[&worker] = ucx_address;
}

bool RemoteObjects::Locate(ObjectEntry* entry, const WorkerConnection& to, wire::InputAt* at) {
  MutexLock lock(&mu_);
  auto it = records_.find(entry);
  if (it == records_.end() || !it->second.result || it->second.request != 0) return false;
  const Record& record = it->second;
  wire::InputAt found = *at;  // `at` is left as it was unless the value is located
  found.object = entry->id;
  found.held = record.worker_id;
  found.bytes = record.bytes;
  if (record.worker.get() == &to) {
    found.here = true;
  } else {
    // Refs inside to objects its keeper made name nothing another worker (or this driver, until
    // it reads the value) knows: the value goes through the driver, which records them.
    if (record.own_refs) return false;
    auto address = addresses_.find(record.worker.get());
    if (address == addresses_.end()) return false;
    found.ucx_address = address->second;
  }
  *at = std::move(found);
  return true;
}

uint64_t RemoteObjects::held() const {
  MutexLock lock(&mu_);
  return records_.size();
}

}  // namespace gpupool::runtime
