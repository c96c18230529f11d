// File: runtime/tasks/remote_objects.h
//
// The driver's objects whose values its workers keep (Ray's ownership model: the driver owns
// every object of the job; the process that made a value keeps it until the owner needs it).
// Two kinds reach the driver this way:
//   - a task's result too big to travel with its outcome (wire::Outcome::held);
//   - an object a worker made (a Put in its task, a CPU task it ran for itself) whose ref came to
//     the driver inside a result or another such value. It keeps its id: the worker made it in
//     its own range of ids (wire::Welcome::object_id_base), so the id names it everywhere.
// Each is a pending entry of the driver's store, marked remote. The first Get, wait or task that
// depends on it (ObjectStore's RemoteValues calls) asks the worker for it (wire::Fetch), and the
// answer completes the entry; refs inside the value are imported the same way. The worker keeps
// one hold per ref it sent; the driver gives them back (wire::Release) once it has the value, or
// when the entry is freed unread. A worker asked for an object it is still computing answers
// when it has it. A GPU task that runs in a worker does not have a kept result fetched here: its
// worker gets it from the keeper itself (Locate; runtime/tasks/task_inputs.h).
//
// A worker that goes away with values the driver had not fetched takes them along. A task's
// result is made again from its lineage (Ray's lineage reconstruction): the driver keeps the
// finished task (its function, arguments and the refs among them, which keep their own lineage
// alive in turn) while its result's entry lives unfetched (KeepLineage), and runs it again when
// the keeper goes, as a retry against its max_retries; whoever waits for the value keeps waiting.
// Keeping a task keeps its inputs too (a chain of kept results stays whole while its last link
// may be needed); up to kLineageBudgetBytes are kept at once, counting each task's arguments and
// the values workers keep for its inputs (Ray's default max_lineage_bytes; values this driver
// holds are not counted). What cannot be made again (an object a worker made with a Put, a task
// with no retry left or not kept) fails with kDataLoss naming the object, the worker and why.
//
// The other way, the driver lends: a worker that holds a ref to one of the driver's objects says
// so (wire::Borrow), and the driver keeps the object alive until the worker lets go (Release) or
// goes away (runtime/tasks/driver_imports.h is the worker's side). The result of a GPU task a
// worker's task submitted is handed over to that worker the same way (HandOver); a value a worker
// sends along with such a task settles what it kept for the driver (SettleFrom).
//
// Thread-safety: thread-safe. HoldResult, OnLost, HandOver and SettleFrom run on a worker
// connection's reader thread; Import inside a DecodingFrom scope for the worker whose bytes are
// read (its reader, or decode_ for a value fetched over UCX); KeepLineage on the thread settling
// a task (Executor::Finish); Locate on lease threads; Want and Forget on any thread. mu_ is never held while decoding or
// resolving an entry, nor while sending (FetchAsync and Post only queue, and are called under it).
#ifndef GPUPOOL_RUNTIME_TASKS_REMOTE_OBJECTS_H_
#define GPUPOOL_RUNTIME_TASKS_REMOTE_OBJECTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "runtime/client/callback_thread.h"
#include "runtime/objects/object_store.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/worker_pool.h"
#include "transport/object_transfer.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

class RemoteObjects final : public RemoteValues, public std::enable_shared_from_this<RemoteObjects> {
 public:
  // `resolved`: a task that waited for an entry this resolved (Executor::DependencyResolved).
  // `rebuild`: runs kept lineages' tasks again for their pending results, retained for them
  // (Executor::Rebuild); an error says why one is not, and that task stays the caller's.
  using Rebuild = std::function<std::vector<absl::Status>(const std::vector<std::pair<Task*, ObjectEntry*>>& lost)>;
  RemoteObjects(ObjectStore* store, std::function<void(Task*, ObjectEntry*)> resolved, Rebuild rebuild = nullptr)
      : store_(*store), resolved_(std::move(resolved)), rebuild_(std::move(rebuild)) {}

  // The most bytes of finished tasks (their arguments) kept as lineage at once.
  static constexpr uint64_t kLineageBudgetBytes = uint64_t{1} << 30;

  // While a frame from `from` is decoded on this thread, refs to its objects are holds it keeps
  // for the driver (Import).
  class DecodingFrom {
   public:
    explicit DecodingFrom(WorkerConnection* from);
    ~DecodingFrom();
    WorkerConnection* from() const { return from_; }
    // Refs to `from`'s own objects read so far (each took one of the holds it counted).
    uint64_t refs_read = 0;

   private:
    WorkerConnection* const from_;
    DecodingFrom* const previous_;
  };

  // A task's result that `from` kept under its id `held`: the pending entry `result` is marked
  // remote, fetched when needed and read with `decode`. `what` names it in errors ("the result
  // of task 'f' (id 7)"). False when the entry was resolved meanwhile (its task was cancelled):
  // the worker's hold is given back.
  // `own_refs`: the value holds refs to objects `from` made (wire::Outcome::held_own_refs);
  // `bytes`: its size there.
  bool HoldResult(ObjectEntry* result, WorkerConnection& from, uint64_t held, detail::BoxDecoder decode,
                  std::string what, bool own_refs = false, uint64_t bytes = 0) ABSL_LOCKS_EXCLUDED(mu_);

  // A ref to a worker's object met while decoding (detail::ImportObject in the driver): the live
  // entry, or a new pending one that the worker being decoded keeps. Retained for the caller.
  // Throws kNotFound when no live entry has the id and no worker being decoded made it.
  detail::ObjectHeader* Import(ObjectId id, detail::BoxDecoder decode) ABSL_LOCKS_EXCLUDED(mu_);

  // The worker's answer to a Fetch (WorkerPool's reader thread). False when no record asked for
  // it (a stale answer, dropped).
  bool OnFetched(WorkerConnection& from, const wire::FetchedView& answer, bool over_ucx = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker sent, unasked, the value of an object it keeps for this driver (with a GPU task it
  // submitted: wire::Submit's inline values): the pending entry completes with it, read as a fetch
  // would be, and the worker's holds go back. False when the entry has no record kept by `from`,
  // its fetch is out already (its answer settles it), or the value does not read (the entry stays
  // as it was).
  bool SettleFrom(ObjectEntry* entry, WorkerConnection& from, std::string_view value) ABSL_LOCKS_EXCLUDED(mu_);
  // The worker is gone: every value it kept and the driver had not fetched is made again from
  // its lineage, or else lost; and what it borrowed goes back.
  void OnLost(WorkerConnection& gone, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // A worker borrows one of the driver's objects (one that no longer exists is not kept), and
  // lets go of `count` of its borrows.
  void Lend(WorkerConnection& to, ObjectId id) ABSL_LOCKS_EXCLUDED(mu_);
  // The result of a task `to` submitted (wire::Submit), retained: kept for it until its Borrow
  // of the object takes this reference over as its loan, or until it goes.
  void HandOver(WorkerConnection& to, ObjectEntry* result) ABSL_LOCKS_EXCLUDED(mu_);
  void Returned(WorkerConnection& by, const wire::Release& release) ABSL_LOCKS_EXCLUDED(mu_);

  // RemoteValues.
  void Want(ObjectEntry* entry) override ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(ObjectEntry* entry) override ABSL_LOCKS_EXCLUDED(mu_);

  // A finished task whose result a worker keeps (Executor::Finish): kept as that result's lineage
  // until the driver reads the value or drops the entry, or the worker goes (then run again
  // through `rebuild`). False when not taken (the result has no record any more, or the budget
  // is spent): the task is still the caller's.
  bool KeepLineage(Task* task) ABSL_LOCKS_EXCLUDED(mu_);

  // UCX for the results workers keep (set once workers may start; null: every fetch goes over
  // the worker's connection). Clearing it is final (it stops decode_): only once every worker
  // is gone (their records settled), before the fetcher and its UCX worker are destroyed.
  void UseUcx(transport::UcxWorker* ucx, transport::ObjectFetcher* fetcher) ABSL_LOCKS_EXCLUDED(mu_);
  // Where `worker` serves the results it keeps over UCX (wire::ObjectsAt; its reader thread).
  void ObjectsAt(WorkerConnection& worker, const std::string& ucx_address) ABSL_LOCKS_EXCLUDED(mu_);

  // Where the worker `to`, about to run a task that reads `entry` (pending: a value a worker
  // keeps), gets it without the driver in between: from itself (`here`), or from its keeper's
  // ObjectServer. False when it must ask the driver: the value is not a kept result's bytes, it
  // holds refs to objects its keeper made, its keeper serves nothing over UCX, or the driver is
  // fetching it already (`*at` is then left as it was). The driver's entry
  // stays alive while the task is out (the task holds it), so the keeper keeps the bytes until
  // the driver reads them or drops the entry; a worker that finds them gone asks the driver.
  bool Locate(ObjectEntry* entry, const WorkerConnection& to, wire::InputAt* at) ABSL_LOCKS_EXCLUDED(mu_);

  // Values workers keep for the driver now; the bytes fetched from them so far; and how many
  // of those fetches went over UCX.
  uint64_t held() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t bytes_fetched() const { return bytes_fetched_.load(std::memory_order_relaxed); }
  uint64_t fetched_over_ucx() const { return fetched_over_ucx_.load(std::memory_order_relaxed); }
  // Results made again from their lineage after their keeper went.
  uint64_t rebuilt() const { return rebuilt_.load(std::memory_order_relaxed); }

 private:
  // Frees a kept lineage (its inputs released), never under mu_: releasing them may free entries,
  // whose Forget takes it.
  struct DropLineage {
    // No default member initializers: GCC then refuses it as a unique_ptr deleter declared
    // inside the class it serves.
    std::atomic<uint64_t>* counter;  // lineage_bytes_
    uint64_t bytes;                  // what this lineage counts there (KeepLineage)
    void operator()(Task* task) const;
  };
  // (Not runtime::Lineage, the ranks' serialized one-level lineage: a kept task itself.)
  using KeptTask = std::unique_ptr<Task, DropLineage>;

  struct Record {
    std::shared_ptr<WorkerConnection> worker;  // kept alive for a Release sent after its reader ended
    uint64_t worker_id = 0;   // the object's id in the worker
    detail::BoxDecoder decode = nullptr;
    uint64_t holds = 0;       // the worker's holds the driver owes it back
    uint64_t request = 0;     // the Fetch sent for it (0: none yet); its answer names it
    bool result = false;      // a task's result the worker keeps as bytes (served over UCX too)
    bool own_refs = false;    // a result holding refs to objects its worker made (see Locate)
    uint64_t bytes = 0;       // a result's size in its worker (0: not said)
    std::string what;
    KeptTask lineage;         // a result's finished task (KeepLineage); null: none kept
  };
  using RequestKey = std::pair<WorkerConnection*, uint64_t>;  // (worker, request)
  // Settles a record taken out of the maps: the entry (retained, or null when it was being
  // freed) resolved with `value` or `failure`, and the worker's holds given back when it lives.
  // `read`: the value was read (the holds on the refs inside came back with it); else the first
  // `refs_read` refs inside were.
  void Settle(Record record, ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value, std::exception_ptr failure,
              bool worker_alive, bool read = false, uint64_t refs_read = 0);
  // The failure of a value only `gone` kept.
  static std::exception_ptr LostWith(const Record& record, const WorkerConnection& gone, const absl::Status& why);
  // A record for a pending entry, then its mark (Insert, Mark); an entry whose worker is gone
  // fails at once instead (FailLost).
  void Add(ObjectEntry* entry, Record record) ABSL_LOCKS_EXCLUDED(mu_);
  bool Insert(ObjectEntry* entry, Record record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the entry's record out of records_ into `*out`; false when it has none.
  bool TakeRecord(ObjectEntry* entry, Record* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Mark(ObjectEntry* entry) ABSL_LOCKS_EXCLUDED(mu_);
  void FailLost(ObjectEntry* entry, const WorkerConnection& gone);
  static void SendRelease(WorkerConnection& to, uint64_t object, uint64_t count, bool read = false,
                          uint64_t refs_read = 0);
  // A UCX fetch ended (on decode_, never UCX's own thread: reading a value may run a user's codec
  // and settle tasks): read like an answer on the connection, or, when it failed, asked again
  // over the connection, and that worker is no longer fetched from over UCX.
  void OnUcxFetched(const std::shared_ptr<WorkerConnection>& from, uint64_t request,
                    absl::StatusOr<transport::FetchedObject> got) ABSL_LOCKS_EXCLUDED(mu_);

  ObjectStore& store_;
  const std::function<void(Task*, ObjectEntry*)> resolved_;
  const Rebuild rebuild_;
  // Before the records: their lineages count down here as they go.
  std::atomic<uint64_t> lineage_bytes_{0};
  std::atomic<uint64_t> rebuilt_{0};
  mutable Mutex mu_;
  absl::flat_hash_map<ObjectEntry*, Record> records_ ABSL_GUARDED_BY(mu_);
  // Fetches out, by (worker, request): the entry whose record sent it.
  std::map<RequestKey, ObjectEntry*> asked_ ABSL_GUARDED_BY(mu_);
  // Records whose entries were freed while their Fetch was out: the answer is still read (the
  // refs inside are holds to give back), by the same key.
  std::map<RequestKey, Record> orphans_ ABSL_GUARDED_BY(mu_);
  uint64_t last_request_ ABSL_GUARDED_BY(mu_) = 0;
  transport::UcxWorker* ucx_ ABSL_GUARDED_BY(mu_) = nullptr;
  transport::ObjectFetcher* fetcher_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<WorkerConnection*, transport::PeerId> peers_ ABSL_GUARDED_BY(mu_);  // workers serving over UCX
  std::map<WorkerConnection*, std::string> addresses_ ABSL_GUARDED_BY(mu_);    // and their addresses
  // Workers gone (OnLost ran): a record for one, made by a read that ended after, is lost at once.
  // Raw pointers, never reused: the WorkerPool keeps every connection until it is destroyed.
  std::set<WorkerConnection*> gone_ ABSL_GUARDED_BY(mu_);

  // Results handed over to the workers that submitted their tasks, not borrowed yet (retained).
  std::map<std::pair<WorkerConnection*, ObjectId>, ObjectEntry*> handed_ ABSL_GUARDED_BY(mu_);
  // The driver's objects workers borrow: retained once per (worker, object), with the count.
  std::map<std::pair<WorkerConnection*, ObjectId>, std::pair<ObjectEntry*, uint64_t>> lent_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> bytes_fetched_{0};
  std::atomic<uint64_t> fetched_over_ucx_{0};
  // Reads values fetched over UCX, in order: started by the first UseUcx with a fetcher, stopped
  // by UseUcx(nullptr, nullptr), never reset before the destructor. Last: what it runs uses the
  // members above.
  std::unique_ptr<CallbackThread> decode_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_REMOTE_OBJECTS_H_
