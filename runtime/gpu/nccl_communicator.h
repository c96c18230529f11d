// File: runtime/gpu/nccl_communicator.h
//
// NCCL communicators for device buffers on real GPUs: what TaskContext's collectives use when
// every member is a distinct real GPU (NCCL refuses two ranks on one GPU and does not run across
// MIG instances; those cases, and simulated GPUs, stay on the host path).
//
// Two shapes, one class:
//   * Over the GPUs of one gang lease, in this process (ncclCommInitAll): one member per GPU, and
//     each operation takes one buffer per member, launched in one NCCL group.
//   * Over a job's ranks (ncclCommInitRank, one member per process): rank 0 makes the unique id
//     (UniqueId()) and the job's control channel carries it to the others.
//
//   absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::OverDevices({0, 1});
//   NcclBuffer a{ptr0, stream0}, b{ptr1, stream1};
//   absl::Status s = (*comm)->AllReduce({a, b}, count, kFloat, ReduceOp::kSum, wait);
//
// Errors: kInvalidArgument for the caller's mistakes (NCCL's invalid argument or usage included),
// kUnavailable for NCCL's other failures, with its own text.
//
// Waiting: an operation is enqueued on the members' streams, then waited for by polling, so it
// can be given up: `wait.stop()` true (the caller's reason: a task cancelled, a lease lost) or the deadline
// passed aborts the communicator (ncclCommAbort), which ends the kernels instead of leaving them
// spinning on a peer that will never come. An aborted communicator is dead: every later call
// fails with the reason, and the owner builds a new one. Errors name the operation and NCCL's
// own message.
//
// Thread-compatible: one operation at a time (as NCCL requires of one communicator); a revocation
// reaches a waiting operation through NcclWait::stop, polled on the waiting thread.
#ifndef GPUPOOL_RUNTIME_GPU_NCCL_COMMUNICATOR_H_
#define GPUPOOL_RUNTIME_GPU_NCCL_COMMUNICATOR_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gpupool/task_context.h"  // ReduceOp; element codes (gpupool/internal/reduce_element.h)

namespace gpupool::runtime {

// One member's memory for one operation, and the stream it is ordered on (cudaStream_t).
struct NcclBuffer {
  void* data = nullptr;
  void* stream = nullptr;
};

// How an operation waits for its kernels.
struct NcclWait {
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> stop;  // polled; true gives the operation up (Aborted)
};

class NcclCommunicator {
 public:
  // NCCL's version ("2.28.9"), or the reason there is none.
  static absl::StatusOr<std::string> Version();
  // A fresh id for OverRanks (its 128 bytes), made by one rank and sent to the others.
  static absl::StatusOr<std::string> UniqueId();

  // One member per CUDA device, all in this process. InvalidArgument for a repeated device.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> OverDevices(const std::vector<int>& cuda_devices);
  // This process's member of a communicator of `ranks` processes, on `cuda_device`. Every rank
  // calls it with the same id; it waits for them all (up to `wait`).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> OverRanks(const std::string& unique_id, int ranks,
                                                                     int rank, int cuda_device,
                                                                     const NcclWait& wait);
  ~NcclCommunicator();  // destroys (or, if an operation failed, aborts) every member
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int members() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& cuda_devices() const { return devices_; }
  bool broken() const { return !broken_.ok(); }

  // `buffers` holds one buffer per member of this process, in member order; `count` elements of
  // `element_code` (detail::ElementCode) each. In place.
  absl::Status AllReduce(absl::Span<const NcclBuffer> buffers, size_t count, int element_code, ReduceOp op,
                         const NcclWait& wait);
  // `root` is a rank of the communicator (a member index for OverDevices).
  absl::Status Broadcast(absl::Span<const NcclBuffer> buffers, size_t bytes, int root, const NcclWait& wait);
  // Point to point, between ranks of an OverRanks communicator (one member here). NCCL's: a send
  // completes only once the peer receives, and messages have no tags (TaskContext's Send/Recv of
  // DeviceBuffers therefore stage through host memory, whose semantics it documents).
  absl::Status Send(const NcclBuffer& buffer, size_t bytes, int peer, const NcclWait& wait);
  absl::Status Recv(const NcclBuffer& buffer, size_t bytes, int peer, const NcclWait& wait);

  // Aborts every member (ncclCommAbort) and marks the communicator broken with `why`.
  void Abort(absl::Status why);

 private:
  struct Member;
  NcclCommunicator();
  absl::Status CheckBuffers(absl::Span<const NcclBuffer> buffers, const char* what) const;
  absl::Status CheckRank(int rank, const char* verb) const;  // InvalidArgument outside 0..ranks-1
  absl::Status PointToPoint(bool send, const NcclBuffer& buffer, size_t bytes, int peer, const NcclWait& wait);
  // Waits for the members to be ready (a nonblocking call that answered ncclInProgress, or a
  // nonblocking init: `pending`), then for the buffers' streams. `what` names the operation in
  // errors (made only when one happens: the fast path builds no string).
  absl::Status Await(absl::Span<const NcclBuffer> buffers, bool pending, const NcclWait& wait,
                     absl::FunctionRef<std::string()> what);
  // One NCCL call per member (`call(i, comm)`), grouped when there are several.
  template <typename Call>
  int Launch(Call call);
  // After Launch: aborts on a launch error, else waits.
  absl::Status Finish(int launched, absl::Span<const NcclBuffer> buffers, const NcclWait& wait,
                      absl::FunctionRef<std::string()> what);

  std::vector<int> devices_;
  int ranks_ = 0;  // of the whole communicator (members_ are this process's)
  std::vector<std::unique_ptr<Member>> members_;
  absl::Status broken_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_GPU_NCCL_COMMUNICATOR_H_
