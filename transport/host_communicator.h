// File: transport/host_communicator.h
//
// A communicator over N processes through host memory and UCX: what a gang task's collectives use
// where NCCL cannot serve (simulated GPUs, several slots on one GPU, MIG instances). Same shape as
// an MPI or NCCL communicator: ranks 0..N-1, collectives called by every rank in the same order.
//
//   // addresses[r] = rank r's UcxWorker::address(), gathered out of band (MPI, the job's RPC)
//   absl::StatusOr<std::unique_ptr<HostCommunicator>> comm =
//       HostCommunicator::Create(*worker, rank, addresses);
//   absl::Status s = (*comm)->AllReduce(absl::MakeSpan(gradients), ReduceOp::kSum);
//
// AllReduce is a ring (reduce-scatter, then all-gather): each rank sends and receives
// 2(N-1)/N of the buffer whatever N is, which is optimal in bandwidth, and gang tasks reduce
// gradients of megabytes where bandwidth is what matters. Recursive doubling would take log2(N)
// steps instead of 2(N-1) but move the whole buffer at each step, and needs extra steps when N is
// not a power of two; it wins only for small buffers. Broadcast is a binomial tree (log2(N)
// rounds, the root sends log2(N) copies instead of N-1). Results are bit-identical on every rank
// (each chunk is reduced on one rank, in a fixed order, then copied).
//
// Failure: a communicator stands or falls as a whole, as NCCL's does. When any rank fails (its
// endpoint reports an error, or an operation's deadline passes) every pending and later operation
// fails with Unavailable naming the rank, or DeadlineExceeded; the job then rebuilds a
// communicator over the live ranks. Create probes every rank until it answers, so every endpoint
// is wired up (a dead rank is noticed by all, not only its ring neighbours) and no message is
// sent to a rank before its communicator exists to receive it.
//
// Point to point: Send completes once the bytes left (a receiver that has not posted the Recv
// yet holds them), so ranks can all send before they receive without deadlock. Messages from one
// sender with one tag arrive in order. Tags at or above kReservedTags are the collectives'.
//
// Threading: blocking calls from any thread but the worker's loop thread; one operation at a time
// per communicator (collectives are ordered by the calls, as in MPI). One HostCommunicator per
// UcxWorker at a time (it owns AmId::kCollective); destroy it before the worker.
#ifndef GPUPOOL_TRANSPORT_HOST_COMMUNICATOR_H_
#define GPUPOOL_TRANSPORT_HOST_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/element_reduce.h"  // ReduceOp
#include "transport/ucx_worker.h"

namespace gpupool::transport {

struct HostCommunicatorOptions {
  // Each blocking call (Create's handshake, a Send, a Recv, each step of a collective) fails with
  // DeadlineExceeded after this long.
  absl::Duration timeout = absl::Seconds(60);
};

inline constexpr uint64_t kReservedTags = uint64_t{1} << 63;

class HostCommunicator {
 public:
  // `addresses[r]` is rank r's worker address; addresses[rank] must be `worker.address()`.
  // Connects to every rank and waits until each has answered a probe (all ranks call Create at
  // about the same time); Unavailable / DeadlineExceeded when some rank does not answer,
  // InvalidArgument for a bad rank or address list.
  static absl::StatusOr<std::unique_ptr<HostCommunicator>> Create(
      UcxWorker& worker, int rank, std::vector<std::string> addresses,
      HostCommunicatorOptions options = {});
  ~HostCommunicator();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }

  absl::Status Send(int dst, uint64_t tag, absl::Span<const std::byte> data);
  // Receives the next message from `src` with `tag` into `dst`; returns its size. OutOfRange when
  // it is larger than `dst` (the message is consumed).
  absl::StatusOr<size_t> Recv(int src, uint64_t tag, absl::Span<std::byte> dst);

  // `data` on `root` is copied into `data` on every rank (same size everywhere).
  absl::Status Broadcast(int root, absl::Span<std::byte> data);
  // Element-wise reduction of `data` across ranks, in place. T: float, double, int32_t, int64_t.
  template <typename T>
  absl::Status AllReduce(absl::Span<T> data, ReduceOp op);

 private:
  struct Receive;     // a posted Recv
  struct Unexpected;  // a message that arrived before its Recv

  HostCommunicator(UcxWorker& worker, int rank, HostCommunicatorOptions options);
  absl::Status Handshake();
  void Probe();  // loop thread: one round of the handshake
  // Reduce-scatter + all-gather over `bytes` split in size() chunks of whole elements.
  absl::Status RingAllReduce(absl::Span<std::byte> bytes, size_t element_size,
                             void (*reduce)(std::byte* into, const std::byte* from, size_t n));
  // One exchange step: send `out` to `dst` while receiving `in` from `src`.
  absl::Status Exchange(int dst, absl::Span<const std::byte> out, int src,
                        absl::Span<std::byte> in, uint64_t tag);
  uint64_t CollectiveTag(uint32_t step) const { return kReservedTags | (sequence_ << 20) | step; }
  absl::Status CheckRank(int r, const char* what) const;

  // Loop thread.
  void StartSend(int dst, uint64_t tag, absl::Span<const std::byte> data, OpDone done);
  void StartRecv(int src, uint64_t tag, absl::Span<std::byte> dst,
                 absl::AnyInvocable<void(absl::StatusOr<size_t>) &&> done);
  void OnMessage(AmMessage& message);
  void OnPeerFailed(PeerId peer, const absl::Status& status);
  void Break(absl::Status why);
  void DeliverUnexpected(Unexpected& message, Receive& receive);

  UcxWorker& worker_;
  const int rank_;
  const HostCommunicatorOptions options_;
  std::vector<PeerId> peers_;  // by rank; constant after Create
  uint64_t sequence_ = 0;      // collectives started; caller's thread

  // Loop thread only.
  absl::flat_hash_map<PeerId, int> rank_of_;
  std::map<std::pair<int, uint64_t>, std::deque<std::unique_ptr<Receive>>> receives_;
  std::map<std::pair<int, uint64_t>, std::deque<std::unique_ptr<Unexpected>>> unexpected_;
  absl::Status broken_;  // the first failure; every operation fails with it from then on
  std::vector<bool> unanswered_;  // handshake: ranks that have not answered a probe yet
  absl::AnyInvocable<void() &&> handshake_done_;
  absl::Time handshake_deadline_;
  uint64_t failure_listener_ = 0;
};

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_HOST_COMMUNICATOR_H_
