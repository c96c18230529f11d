// File: transport/ucx_worker.h
//
// The process's one UCX (UCP) context and worker, and the thread that drives it: the data plane's
// event loop. Object transfer (object_transfer.h) and the host communicator (host_communicator.h)
// are protocols that run on this loop.
//
//   absl::StatusOr<std::unique_ptr<UcxWorker>> worker = UcxWorker::Create({.transports = "tcp"});
//   SendAddressOutOfBand((*worker)->address());               // over MPI, a pipe, the head's RPC
//   absl::StatusOr<PeerId> peer = (*worker)->Connect(peer_address, "rank 3");
//
// Why a progress thread rather than progress-on-wait: an object's owner must answer fetches while
// its application threads compute and never call into the transport, and UCX moves nothing unless
// someone calls ucp_worker_progress. So one thread owns the worker: it is the only thread that
// touches UCP objects (the worker runs in UCS_THREAD_MODE_SINGLE, without UCX's locks), other
// threads hand it work with Post() and wait on their own notifications. It polls while traffic
// flows (spin_before_sleep after its last event, which is what bandwidth needs) and otherwise
// sleeps on the worker's event fd (ucp_worker_arm + poll), so an idle process costs no CPU.
//
// Thread-safety: Create, address, Connect, Post, RunInLoop, SetAmHandler, ClearAmHandler,
// FailPeer and the destructor may be called from any thread; those that wait for the loop
// (Connect, RunInLoop, SetAmHandler, ClearAmHandler, the destructor) not from the loop thread. Everything marked
// "Loop thread only" must run on the progress thread: inside an AM handler, a completion callback,
// a timer or a closure given to Post. Every callback this class invokes runs on the loop thread and
// never inside the call that registered it.
//
// Peer failure: endpoints are created with UCP_ERR_HANDLING_MODE_PEER (unless
// UcxOptions::detect_peer_failure is off, see there). When UCX reports a peer as failed (connection reset, keepalive timeout) or FailPeer is called, the endpoint is force-closed,
// which completes every operation still on it with an error, and the peer's failure listeners run.
// Operations on a failed peer fail with absl::UnavailableError naming it; the process never
// crashes or waits forever because of a peer.
#ifndef GPUPOOL_TRANSPORT_UCX_WORKER_H_
#define GPUPOOL_TRANSPORT_UCX_WORKER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

// UCP's handle types, so this header needs no UCX include path.
struct ucp_context;
struct ucp_worker;
struct ucp_ep;

namespace gpupool::transport {

struct UcxOptions {
  // Which UCX transports the worker may use ("self" is always added, so a process can fetch from
  // itself):
  //   "default"  whatever UCX finds, its choice per peer (shared memory on a host, tcp across)
  //   "tcp"      sockets only
  //   "shm"      shared memory only: sysv/posix for messages, cma for single-copy rendezvous
  //   otherwise  passed to UCX as its UCX_TLS list, e.g. "tcp,cma"
  std::string transports = "default";
  // Network devices tcp may use (UCX_NET_DEVICES). "lo" keeps tests and benchmarks on loopback;
  // "" lets UCX use every interface, which a multi-node job needs.
  std::string net_devices = "lo";
  // Endpoints ask UCX to report a failed peer (UCP_ERR_HANDLING_MODE_PEER). UCX 1.13's
  // shared-memory transports (sysv, posix, cma) cannot report one, so UCX leaves them out of such
  // endpoints: with detection on, peers on one host talk over tcp loopback. Turn it off to use
  // shared memory (transports "shm", or "default" on one host) between peers that trust each
  // other to stay up: a peer that dies is then noticed only by deadlines (a fetch's timeout),
  // and an operation whose bytes were in flight to or from it may never complete.
  bool detect_peer_failure = true;
  // How this process is named in errors.
  std::string name = "gpupool";
  // How long the progress thread keeps polling after its last event before it sleeps.
  absl::Duration spin_before_sleep = absl::Milliseconds(2);
};

// A peer endpoint, from Connect. Never reused within one UcxWorker.
using PeerId = uint64_t;

// Active message ids, one place so the protocols sharing a worker cannot collide.
enum class AmId : unsigned {  // each one is registered in UcxWorker::Create
  kFetchRequest = 1,  // object_transfer: fetcher -> owner
  kFetchReply = 2,    // object_transfer: owner -> fetcher (eager or rendezvous payload)
  kCollective = 3,    // host_communicator: rank -> rank
  kObjectReceipt = 4, // runtime object exchange: a ref's receiver -> its sender (fetch_wire.h)
};

// One received active message, valid only during the handler call that receives it.
class AmMessage {
 public:
  absl::string_view header() const { return header_; }
  // Bytes the sender offers: the eager payload's size, or what a rendezvous would deliver.
  size_t data_size() const { return data_size_; }
  // True when the payload is still at the sender: receive it with UcxWorker::ReceiveAmData, or
  // leave it and it is dropped (the sender's send then completes successfully).
  bool is_rendezvous() const { return rendezvous_; }
  // The payload of an eager message; empty for a rendezvous.
  absl::Span<const std::byte> eager_data() const {
    return rendezvous_ ? absl::Span<const std::byte>()
                       : absl::Span<const std::byte>(static_cast<const std::byte*>(data_),
                                                     data_size_);
  }

 private:
  friend class UcxWorker;
  friend struct UcxCallbacks;
  absl::string_view header_;
  void* data_ = nullptr;  // eager bytes, or UCX's rendezvous descriptor
  size_t data_size_ = 0;
  bool rendezvous_ = false;
  bool claimed_ = false;  // ReceiveAmData took the descriptor
  ucp_ep* reply_ep_ = nullptr;
};

// Completion of a send or receive: OK, or why not (Unavailable naming the peer when it failed).
using OpDone = absl::AnyInvocable<void(absl::Status) &&>;
using AmHandler = absl::AnyInvocable<void(AmMessage&)>;
using PeerFailureListener = absl::AnyInvocable<void(PeerId, const absl::Status&)>;

class UcxWorker {
 public:
  // Reads UCX's configuration (UCX_* environment variables apply, then `options` override them),
  // creates the context and worker and starts the progress thread. Unavailable when UCX cannot
  // start with those transports.
  static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(UcxOptions options);

  // Stops the progress thread, force-closes every endpoint (peers see this process fail) and
  // releases UCX. Protocols using the worker (ObjectServer, ObjectFetcher, ...) must be destroyed
  // first. Must not be called on the loop thread.
  ~UcxWorker();

  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // This worker's UCP address: opaque bytes for peers' Connect, exchanged out of band.
  const std::string& address() const { return address_; }
  const std::string& name() const { return options_.name; }
  // The largest active-message header UCX carries (protocols bound their headers by it).
  size_t max_am_header() const { return max_am_header_; }

  // An endpoint to the worker at `address` (from its address()), named `peer_name` in errors.
  // Connecting twice to one address returns the same peer unless it has failed since, in which
  // case a fresh endpoint is made. Wire-up happens in the background: a peer that does not exist
  // is reported by the operations on it, not here. InvalidArgument for an empty address.
  absl::StatusOr<PeerId> Connect(absl::string_view address, absl::string_view peer_name);

  // Runs `fn` on the loop thread, soon; never inside Post. Closures posted after the destructor
  // has begun are destroyed without running.
  void Post(absl::AnyInvocable<void() &&> fn);
  // Runs `fn` on the loop thread and returns when it has run. Not on the loop thread.
  void RunInLoop(absl::AnyInvocable<void() &&> fn);
  bool InLoopThread() const { return std::this_thread::get_id() == loop_thread_id_; }

  // Routes active messages with `id` to `handler` (on the loop thread); replaces any previous one.
  // Messages for an id without a handler are dropped (a rendezvous payload is never pulled), so
  // a protocol must be listening before its peers learn it is there. Waits for the loop.
  void SetAmHandler(AmId id, AmHandler handler);
  void ClearAmHandler(AmId id);

  // Declares `peer` failed with `why`: its endpoint is force-closed, cancelling what is in
  // flight on it, and the failure listeners run. Used when a peer is alive but unresponsive
  // (a fetch's deadline passed while its bytes were landing in caller memory). Any thread.
  void FailPeer(PeerId peer, absl::Status why);

  // --- Loop thread only ---------------------------------------------------------------------

  // Sends an active message with `header` (copied) and `size` bytes at `data`, which must stay
  // valid and unchanged until `done` runs. UCX sends small payloads eagerly and large ones by
  // rendezvous (the receiver pulls them when it has a destination). `reply` asks UCX to give the
  // receiver a reply endpoint (AmMessage, Reply), so it can answer without connecting back.
  static constexpr size_t kEagerReplyMaxBytes = 1 << 20;
  void SendAm(PeerId peer, AmId id, std::string header, const void* data, size_t size,
              bool reply, OpDone done);
  // Answers `message` (sent with reply=true) on its reply endpoint. Call during its handler.
  // Replies up to kEagerReplyMaxBytes go eagerly whatever UCX's own threshold says: the
  // requester is waiting for exactly this reply, so a rendezvous handshake only adds a round
  // trip (bench/transfer: tcp at 256 KiB went from ~70% to ~100% of ucx_perftest).
  void Reply(const AmMessage& message, AmId id, std::string header, const void* data,
             size_t size, OpDone done);
  // Receives a rendezvous payload into `dst`, which must hold message.data_size() bytes and stay
  // valid until `done` runs. Call during the message's handler, at most once.
  void ReceiveAmData(AmMessage& message, void* dst, OpDone done);

  // Calls `listener(peer, status)` whenever a peer fails. Returns a handle for removal.
  uint64_t AddPeerFailureListener(PeerFailureListener listener);
  void RemovePeerFailureListener(uint64_t handle);

  // The failure of `peer` (Unavailable naming it), or OK while it is usable.
  absl::Status PeerStatus(PeerId peer) const;
  std::string PeerName(PeerId peer) const;
  // UCX's description of the endpoint: the transports and devices of each lane (diagnostics).
  std::string DescribePeer(PeerId peer) const;

  // Runs `fn` at `when` (or soon after). Returns a handle for CancelTimer.
  uint64_t AddTimer(absl::Time when, absl::AnyInvocable<void() &&> fn);
  void CancelTimer(uint64_t handle);

 private:
  struct Peer;
  struct Op;
  struct AmSlot;

  explicit UcxWorker(UcxOptions options);
  absl::Status Init();
  void Loop();
  bool RunPosted();
  bool RunDueTimers();
  void SleepUntilEvent();
  void Teardown();

  friend struct UcxCallbacks;  // UCX's C callbacks, in ucx_worker.cc
  // Tracks the request UCX returned for `op` (or completes `op` now if UCX finished or failed
  // the operation at once).
  void Submit(void* status_ptr, Op* op);
  void Complete(Op* op, absl::Status status);
  void OnEndpointError(Peer& peer, absl::Status why);
  void CloseEndpoint(Peer& peer, bool flush = false);
  void ReapClosedEndpoints();

  // Constant after Create.
  const UcxOptions options_;
  ucp_context* context_ = nullptr;
  ucp_worker* worker_ = nullptr;
  std::string address_;
  size_t max_am_header_ = 0;
  int event_fd_ = -1;
  std::thread loop_thread_;
  std::thread::id loop_thread_id_;

  mutable absl::Mutex mu_;
  std::vector<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> has_posted_{false};  // posted_ may be non-empty
  std::atomic<bool> stop_requested_{false};

  // Loop thread only (or before the thread starts / after it ends).
  PeerId next_peer_id_ = 1;
  absl::flat_hash_map<PeerId, std::unique_ptr<Peer>> peers_;
  absl::flat_hash_map<std::string, PeerId> peer_by_address_;
  std::map<unsigned, std::unique_ptr<AmSlot>> am_slots_;
  uint64_t next_listener_ = 1;
  std::map<uint64_t, PeerFailureListener> failure_listeners_;
  uint64_t next_timer_ = 1;
  std::map<std::pair<absl::Time, uint64_t>, absl::AnyInvocable<void() &&>> timers_;
  absl::flat_hash_map<uint64_t, absl::Time> timer_deadlines_;
  std::vector<void*> closing_requests_;  // ucp_ep_close_nbx requests still in flight
};

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_UCX_WORKER_H_
