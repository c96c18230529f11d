// File: transport/object_transfer.h
//
// Moving an object's bytes from the process that owns it to one that needs it, over UcxWorker.
// The owner runs an ObjectServer that answers fetches by object id; a fetcher asks an owner
// (a PeerId from UcxWorker::Connect with the owner's address) for an id and gets the bytes into
// memory the caller gives, or into a new buffer.
//
//   // owner                                        // fetcher
//   ObjectRegistry registry;                         auto fetcher = ObjectFetcher::Create(*worker);
//   registry.Add("obj-7", bytes);                    PeerId owner = *worker->Connect(addr, "rank 0");
//   auto server = ObjectServer::Start(               absl::StatusOr<FetchedObject> obj =
//       *worker, registry.AsLookup());                   (*fetcher)->Fetch(owner, "obj-7");
//
// Protocol: one round trip of UCP active messages. The fetcher sends a request (its request id
// and the object id, in the AM header, bounded); the owner answers with a reply header (status,
// size) carrying the object as the AM payload. UCX sends that payload eagerly when it is small
// and by rendezvous above its threshold (auto-tuned per transport, tens of KiB). Active messages
// rather than tag matching because the fetcher learns the object's size in the same message that
// offers the bytes: on a rendezvous the reply handler picks the destination (caller memory, or a
// buffer of exactly that size) and UCX pulls the bytes straight into it. Nothing is staged in
// gpupool's own buffers (shared memory moves them with one cma copy; tcp moves them through the
// socket), and a miss (NotFound) costs the same single round trip. Tag matching would need the
// receive posted before the size is known, so a second round trip for "new buffer" fetches.
//
// Failures: a fetch fails on its own; the worker and fetches from other owners go on.
//   NotFound           the owner does not serve that id (the message names both)
//   Unavailable        the owner failed (died, connection reset) before or during the transfer;
//                      every fetch from it fails so. Without peer-failure detection (shared
//                      memory, UcxOptions::detect_peer_failure) a dead owner shows as:
//   DeadlineExceeded   no complete answer within FetchOptions::timeout; if bytes were landing
//                      in caller memory then, the owner's endpoint is reset (UCX cannot cancel a
//                      rendezvous halfway, and the caller's buffer must be free when we return),
//                      which fails the other fetches from that owner with Unavailable
//   OutOfRange         the object is larger than the caller's buffer
//   ResourceExhausted  a new buffer of the object's size could not be allocated
//   InvalidArgument    an object id longer than kMaxObjectIdBytes
// The server checks every request's size and layout; garbage is counted and dropped, never
// trusted. Ids and the message in a reply are bounded too, so a bad owner cannot hurt a fetcher.
//
// Access: a server started with an access key answers only requests that carry the same key
// (the fetcher's); any other gets PermissionDenied, whether the object exists or not. A job's
// ranks share one key made at bootstrap, so a process that learnt a worker's address still
// cannot read the job's objects. The key travels in clear, as everything on UCX does here.
//
// Start the ObjectServer before the owner's address is published: a request that reaches a
// worker with no server is dropped, and its fetch ends at its deadline.
//
// Threading: one ObjectServer and one ObjectFetcher per UcxWorker (they own the fetch AM ids).
// Their blocking calls may come from any thread but the worker's loop thread; the async ones
// call back on the loop thread. Both must be destroyed before their worker.
#ifndef GPUPOOL_TRANSPORT_OBJECT_TRANSFER_H_
#define GPUPOOL_TRANSPORT_OBJECT_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/ucx_worker.h"

namespace gpupool::transport {

// Longest object id a fetch may name (also capped by the worker's max_am_header()).
inline constexpr size_t kMaxObjectIdBytes = 1024;

// What a lookup hands the server: the bytes to send, and what to call when no transfer reads
// them any more (sent, or failed). The bytes must stay valid and unchanged until then.
struct ServedObject {
  absl::Span<const std::byte> bytes;
  absl::AnyInvocable<void() &&> release;  // may be empty
};

// Finds the object `id` for a fetch; NotFound when it is not served here (other errors are passed
// to the fetcher with their code and message). Runs on the worker's loop thread: keep it short.
using ObjectLookup = absl::AnyInvocable<absl::StatusOr<ServedObject>(absl::string_view id)>;

// Objects served from memory the caller keeps, with pins so a removal waits for transfers in
// flight. Thread-safe.
class ObjectRegistry {
 public:
  ObjectRegistry() = default;
  ObjectRegistry(const ObjectRegistry&) = delete;
  ObjectRegistry& operator=(const ObjectRegistry&) = delete;
  // Every entry must be removed first (Remove waits for its transfers).
  ~ObjectRegistry();

  // Serves `bytes` as `id`; they must stay valid and unchanged until Remove(id) returns.
  // AlreadyExists when `id` is served.
  absl::Status Add(std::string id, absl::Span<const std::byte> bytes);
  // Stops serving `id` and returns once no transfer reads its bytes. NotFound when not served.
  absl::Status Remove(absl::string_view id);
  // The same without waiting: `done` runs once no transfer reads the bytes, at once (on this
  // thread) when none does or `id` is not served (NotFound then), else on the thread whose
  // transfer ends last. For a caller that must not wait on a slow reader.
  absl::Status RemoveThen(absl::string_view id, absl::AnyInvocable<void() &&> done);
  // The lookup for ObjectServer::Start; the registry must outlive the server.
  ObjectLookup AsLookup();

 private:
  struct Entry {
    absl::Span<const std::byte> bytes;
    int pins = 0;
    absl::AnyInvocable<void() &&> then;  // removed by RemoveThen: what runs when the last pin goes
  };
  absl::StatusOr<ServedObject> Lookup(absl::string_view id);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  // Removed by RemoveThen while transfers still read them.
  absl::flat_hash_map<Entry*, std::unique_ptr<Entry>> retiring_ ABSL_GUARDED_BY(mu_);
  int total_pins_ ABSL_GUARDED_BY(mu_) = 0;
};

// Answers fetches on a worker until destroyed.
class ObjectServer {
 public:
  struct Stats {
    uint64_t served = 0;        // replies sent with the object
    uint64_t not_found = 0;     // lookups that failed (any code)
    uint64_t rejected = 0;      // malformed requests dropped
    uint64_t refused = 0;       // requests without the access key, answered PermissionDenied
    uint64_t failed_sends = 0;  // replies the fetcher did not get (it died, or reset)
  };

  // `access_key`: what every request must carry ("" serves requests without one); at most
  // kMaxAccessKeyBytes (InvalidArgument otherwise).
  static absl::StatusOr<std::unique_ptr<ObjectServer>> Start(UcxWorker& worker,
                                                             ObjectLookup lookup,
                                                             std::string access_key = {});
  // Stops answering, then waits until every reply in flight has completed or failed (so every
  // ServedObject::release has run).
  ~ObjectServer();

  Stats stats() const;

 private:
  ObjectServer(UcxWorker& worker, ObjectLookup lookup, std::string access_key);
  void OnRequest(AmMessage& message);

  UcxWorker& worker_;
  ObjectLookup lookup_;  // loop thread only
  const std::string access_key_;
  mutable absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

// Whether a failed fetch says its owner cannot be reached (it died, the path to it failed, or it
// answered too late), rather than refusing one object: a caller stops fetching from that owner.
inline bool OwnerUnreachable(const absl::Status& failed) {
  return failed.code() == absl::StatusCode::kUnavailable || failed.code() == absl::StatusCode::kDeadlineExceeded;
}

struct FetchOptions {
  absl::Duration timeout = absl::Seconds(30);
};
// For a whole object of any size (a kept result, a task's input): the deadline covers the whole
// transfer of what may be gigabytes; an owner that dies ends it sooner (its endpoint fails).
inline constexpr FetchOptions kWholeObjectFetch{.timeout = absl::Minutes(10)};

// An object fetched into a buffer of its own size.
struct FetchedObject {
  std::unique_ptr<std::byte[]> data;
  size_t size = 0;
  absl::Span<const std::byte> bytes() const { return {data.get(), size}; }
};

class ObjectFetcher {
 public:
  // `access_key`: presented with every request (the owners' ObjectServer key).
  static absl::StatusOr<std::unique_ptr<ObjectFetcher>> Create(UcxWorker& worker,
                                                               std::string access_key = {});
  // Fails fetches still waiting for a reply (Cancelled) and waits for those receiving bytes.
  ~ObjectFetcher();

  // Fetches `id` from `owner` into `dst`; returns the object's size (<= dst.size()).
  absl::StatusOr<size_t> FetchInto(PeerId owner, absl::string_view id, absl::Span<std::byte> dst,
                                   const FetchOptions& options = {});
  // Fetches `id` from `owner` into a new buffer of the object's size.
  absl::StatusOr<FetchedObject> Fetch(PeerId owner, absl::string_view id,
                                      const FetchOptions& options = {});

  // The same without blocking: `done` runs on the worker's loop thread. For FetchIntoAsync,
  // `dst` must stay valid until then, and the FetchedObject passed to `done` has no data, only
  // the size. Many fetches may be in flight at once (a window of them fills the link).
  using FetchDone = absl::AnyInvocable<void(absl::StatusOr<FetchedObject>) &&>;
  void FetchIntoAsync(PeerId owner, absl::string_view id, absl::Span<std::byte> dst,
                      const FetchOptions& options, FetchDone done);
  void FetchAsync(PeerId owner, absl::string_view id, const FetchOptions& options,
                  FetchDone done);

 private:
  enum class Phase { kAwaitingReply, kReceiving };
  struct Pending {
    PeerId owner;
    std::string owner_name;
    std::string id;
    absl::Span<std::byte> dst;
    bool allocate;  // into a new buffer, made when the size is known
    FetchedObject buffer;
    FetchDone done;
    Phase phase = Phase::kAwaitingReply;
    uint64_t timer = 0;
    absl::Status deadline;  // set when the deadline passed while receiving
  };

  ObjectFetcher(UcxWorker& worker, std::string access_key);
  void Start(PeerId owner, std::string id, absl::Span<std::byte> dst, bool allocate,
             absl::Duration timeout, FetchDone done);
  void OnReply(AmMessage& message);
  void OnReceived(uint64_t request, absl::Status status);
  void OnDeadline(uint64_t request);
  void OnPeerFailed(PeerId peer, const absl::Status& status);
  void Finish(uint64_t request, absl::StatusOr<FetchedObject> result);
  absl::Status Context(const Pending& fetch, const absl::Status& status) const;

  UcxWorker& worker_;
  const std::string access_key_;

  // Loop thread only.
  uint64_t next_request_ = 1;
  absl::flat_hash_map<uint64_t, Pending> pending_;
  uint64_t failure_listener_ = 0;
  bool closing_ = false;

  // Fetches started and not yet finished, so the destructor can wait for them.
  absl::Mutex live_mu_;
  int live_ ABSL_GUARDED_BY(live_mu_) = 0;
};

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_OBJECT_TRANSFER_H_
