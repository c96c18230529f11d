// File: runtime/objects/object_exchange.h
//
// Objects crossing the ranks of an mpirun job. An ObjectRef that leaves its process (encoded in
// a value a task sends to another rank: TaskContext::SendValue, BroadcastValue) is exported: its
// owner pins the object and serves its encoded bytes over UCX (transport/object_transfer.h). The
// rank that decodes the ref imports it: a pending entry under the same id appears in its store
// and the bytes are fetched from the owner in the background at once (a ref that crossed ranks
// is there to be read), then decoded into the local value. Get waits for it like for a task's
// result, and tasks may take it as an argument.
//
// Ids: each rank's store hands out ids above rank << ObjectStore::kRankShift, so an id names its
// owner and is unique in the job.
//
// Lifetime, by receipts: a ref sent with TaskContext::SendValue or BroadcastValue (a SendScope
// names its receivers) is owed one receipt by each receiver, which sends it once its import is
// resolved: fetched, failed, or found already here. The sender keeps the object (serving it) until
// every receipt owed for it has arrived, or the rank owing it is gone; then only its local refs
// keep it. A rank that forwards an imported ref keeps and serves its own copy the same way, and
// the ref names it as a copy, so the forwarder's receivers can fetch from it after the owner has
// freed the object. Refs inside an object another rank fetches are owed receipts by the fetcher
// the same way. A ref exported any other way (without a scope) keeps its object until the runtime
// stops. An imported copy lives while local refs do; a ref decoded again later fetches again.
//
// Failures: an object whose task failed is reported to the importer with that failure's message
// (FailedPrecondition); an owner whose object is not ready yet is asked again until it is (up to
// the group's collective timeout). When the owner dies or cannot be reached (or fails
// mid-transfer), or no longer has the object, the fetch goes to the ranks that held a copy when
// the ref was sent on to this one (a rank serves its copy once it sends the ref on). Sources are tried
// nearest first (same host, then same rack; the owner first among equals). When none can
// serve it, the object is rebuilt from its lineage if the ref carried one
// (runtime/objects/lineage.h: exported while its task was pending or running, with no refs among
// its arguments): the importer runs the task again itself and takes its result; a
// checkpointable task resumes from the owner's last committed snapshot when the checkpoint
// directory is shared (Lineage::checkpoint_key). Otherwise the
// import fails with kUnavailable naming the object and every rank tried.
//
// Thread-safe. Serving runs on the UCX worker's loop thread, so an object is encoded there, once,
// on its first fetch.
#ifndef GPUPOOL_RUNTIME_OBJECTS_OBJECT_EXCHANGE_H_
#define GPUPOOL_RUNTIME_OBJECTS_OBJECT_EXCHANGE_H_

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpupool/object_ref.h"
#include "runtime/group/job_group.h"
#include "runtime/objects/lineage.h"
#include "runtime/objects/object_store.h"
#include "transport/ucx_worker.h"
#include "runtime/sync/mutex.h"

namespace gpupool::transport {
class ObjectServer;
class ObjectFetcher;
struct ServedObject;
}  // namespace gpupool::transport

namespace gpupool::runtime {

class ObjectExchange {
 public:
  // Resolves an imported entry (the job runtime wakes the tasks waiting for it).
  using Resolve = std::function<void(ObjectEntry*, std::unique_ptr<detail::ValueBox>, std::exception_ptr)>;
  // Runs the task a lineage describes in this process; returns its result, retained. Throws
  // gpupool::Error when it cannot (a function this program does not have).
  using Rebuild = std::function<detail::ObjectHeader*(const Lineage& lineage, ObjectId lost)>;
  // See Options::lineage_of.
  using LineageOf = std::function<std::optional<Lineage>(const Task& producer)>;

  struct Options {
    // How long a fetch asks again while the owner's object is not ready yet.
    absl::Duration patience = absl::Minutes(10);
    // How to make a pending object again: the lineage of the task producing it (the task layer
    // knows tasks; this layer sees them as the store's opaque `producer`). Called with the entry's
    // lock held, while the producer is alive; nullopt when it has no lineage. Unset: none has.
    LineageOf lineage_of;
    // The job's key, shared by its ranks at bootstrap: the objects are served only to fetches
    // that carry it (transport/object_transfer.h).
    std::string access_key;
  };

  // Over the group's UCX worker. A group of one has nobody to exchange with: Export does nothing
  // and Import fails.
  static absl::StatusOr<std::unique_ptr<ObjectExchange>> Start(JobGroup& group, ObjectStore& store,
                                                               Resolve resolve, Rebuild rebuild,
                                                               Options options);
  ~ObjectExchange();

  // The rank whose store handed out `id`.
  static int OwnerOf(ObjectId id) { return static_cast<int>(id >> ObjectStore::kRankShift); }

  // What travels with a ref beside its id (the string Export returns and Import takes): the
  // ranks besides the owner that held a copy when the ref left them, and the lineage ("" when
  // the object has none).
  struct Ticket {
    std::vector<int32_t> copies;
    std::string lineage;
    int32_t receipt_to = -1;  // the sender, which keeps the object until it has the receipt; -1: none
  };

  // While one lives, refs exported on this thread leave for `receivers` (ranks; this rank's own
  // is skipped): each owes this rank a receipt per ref, and the object is kept until it arrives
  // (see Lifetime above). Call Leaving() before the bytes are sent; a scope closed without it
  // (encoding failed) takes back what it counted, since no receipt will come.
  class SendScope {
   public:
    SendScope(ObjectExchange& exchange, std::vector<int> receivers);
    ~SendScope();
    SendScope(const SendScope&) = delete;
    SendScope& operator=(const SendScope&) = delete;
    // Encoding is done and the bytes are about to leave: from here the counts stay.
    void Leaving() { leaving_ = true; }

   private:
    friend class ObjectExchange;
    ObjectExchange& exchange_;
    std::vector<int> receivers_;
    std::vector<ObjectId> counted_;  // one per ref exported under it
    SendScope* outer_;
    bool leaving_ = false;
  };

  // Pins and serves `entry` (this rank's own object, or a copy it fetched); returns the ticket
  // that travels with the ref: the other ranks holding a copy, and the lineage when it has one.
  // (The public detail::ExportObject/ImportObject and Codec<ObjectRef> carry it opaquely, in
  // the string they call `lineage`.)
  std::string Export(ObjectEntry* entry);
  // A retained entry for `id`, owned by another rank: the live local copy, or a new pending one
  // being fetched. `ticket`: what Export returned where the ref came from. Throws
  // gpupool::Error: kNotFound in a job of one process, kDataLoss for a malformed ticket.
  ObjectEntry* Import(ObjectId id, detail::BoxDecoder decode, std::string ticket);
  // A ref to this rank's own object came back (`ticket` as for Import): its sender gets its
  // receipt. Throws gpupool::Error (kDataLoss) for a malformed ticket.
  void ReturnedHome(ObjectId id, const std::string& ticket);

 private:
  struct Exported {
    ObjectEntry* entry;  // retained
    // Encoded on the first fetch (worker loop thread); shared with the transfers reading it, so
    // it outlives an unpin while they run.
    std::shared_ptr<const std::string> bytes;
    std::map<int, int> owed;  // receipts still owed, by rank
    bool for_good = false;    // exported outside a SendScope: kept until the runtime stops
    // The refs inside the value, exported when it was encoded: each later fetcher owes receipts
    // for them too.
    std::vector<ObjectId> nested;
  };
  struct Fetch {
    ObjectEntry* entry;  // retained until resolved
    detail::BoxDecoder decode;
    Ticket ticket;
  };

  ObjectExchange(JobGroup& group, ObjectStore& store, Resolve resolve, Rebuild rebuild, Options options);
  absl::StatusOr<transport::ServedObject> Lookup(absl::string_view id);  // loop thread
  // The bytes of exported object `id` for a fetch by `requester` (-1: one that sends no
  // receipts), encoded once and kept. Holds mu_ on entry and return; drops it while encoding.
  absl::StatusOr<std::shared_ptr<const std::string>> ServedBytes(ObjectId id, int requester)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Serves `entry` from now on and keeps it for the receivers of the current SendScope (or for
  // good without one). Holds mu_.
  void ServeLocked(ObjectEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Receipts: sent (any thread but the loop's, without mu_) and received (loop thread).
  void SendReceipt(int to, ObjectId id) ABSL_LOCKS_EXCLUDED(mu_);
  void OnReceipt(int from, ObjectId id);
  void OnPeerFailed(transport::PeerId peer);
  // The endpoint to `rank`, remembered as that rank's (OnPeerFailed knows peers by rank).
  absl::StatusOr<transport::PeerId> PeerOf(int rank);
  // This thread's SendScope when it is one of this exchange's; null otherwise.
  SendScope* CurrentScope() const;
  // `rank` owes one more receipt for `e`, unless it has failed. Holds mu_.
  void OweLocked(Exported& e, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A ref's ticket, its errors naming the object (kDataLoss for a malformed one).
  Ticket TicketOf(ObjectId id, std::string_view ticket) const;
  // Stops keeping the object when nothing is owed for it any more. Holds mu_.
  void UnpinIfDone(std::map<ObjectId, Exported>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLoop();  // drops unpinned entries' refs off the loop thread (their values may be
                       // Python objects, whose destructors take the GIL)
  void FetchLoop();
  void FetchOne(Fetch& f);
  // One source: OK once resolved with the value; kUnavailable when `source` cannot serve it
  // (gone, or failed mid-transfer), so the next source is tried; other errors are final.
  absl::Status FetchFrom(Fetch& f, int source);
  // The owner is gone: runs the lineage's task here and resolves the import with its result.
  void RebuildOne(Fetch& f, const std::string& why);

  JobGroup& group_;
  ObjectStore& store_;
  const Resolve resolve_;
  const Rebuild rebuild_;
  const Options options_;
  std::unique_ptr<transport::ObjectServer> server_;
  std::unique_ptr<transport::ObjectFetcher> fetcher_;

  Mutex mu_;
  std::map<ObjectId, Exported> exported_ ABSL_GUARDED_BY(mu_);
  std::vector<ObjectEntry*> to_release_ ABSL_GUARDED_BY(mu_);  // unpinned, for ReleaseLoop
  std::map<transport::PeerId, int> rank_of_peer_ ABSL_GUARDED_BY(mu_);  // every endpoint made to a rank
  std::set<int> dead_ ABSL_GUARDED_BY(mu_);  // ranks whose peer failed
  uint64_t failure_listener_ = 0;
  std::deque<Fetch> to_fetch_ ABSL_GUARDED_BY(mu_);
  // What each imported object came with, so a copy sent on carries it too (entries of objects
  // freed since are swept at Import).
  std::map<ObjectId, Ticket> origins_ ABSL_GUARDED_BY(mu_);
  ObjectId sweep_from_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  CondVar cv_;
  std::thread fetch_thread_;
  std::thread release_thread_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_OBJECTS_OBJECT_EXCHANGE_H_
