// File: runtime/tasks/rank_device_comm.h
//
// The job's ranks' NCCL communicator for DeviceBuffer collectives (TaskContext::AllReduce and
// Broadcast on device memory), built over the job's control channel (JobGroup) by the first device
// collective that every rank can run on NCCL, and rebuilt when some rank's GPU changed or an
// operation failed.
//
// Agreement, before every device collective, in one small host allreduce, so that every rank makes
// the same group calls whatever its own buffer:
//   * the call itself: every rank must pass the same element count, type, root and reduce
//     operation, and valid ones (NCCL would hang or write out of bounds on a mismatch): otherwise
//     every rank fails alike with kInvalidArgument, naming what differed;
//   * the path: each rank says 0 (this call must stage through host memory: a simulated GPU, a MIG
//     instance or a share of a GPU, or a buffer not on the task's GPU), 1 (NCCL could serve, but
//     this rank has no communicator for its GPU) or 2 (NCCL, with the communicator it has); the
//     minimum decides for everyone. 1 rebuilds: every rank says which GPU it is on, and NCCL is
//     used only when no two ranks share one (NCCL refuses that); rank 0 makes the unique id and
//     the group broadcasts it.
// A job of one rank decides alone, with no message.
//
// Isolation: a communicator holds memory on its GPU outside the leases' budgets, so it is dropped
// (Forget) when the lease on that GPU ends, and only whole GPUs use NCCL. Destroying a healthy
// communicator is an intra-node collective in NCCL: run one rank per node (as the README says).
//
// Thread-safe: a rank's tasks share it. Operations run one at a time (WithComm holds `op_mu_`
// throughout, as the group's host collectives serialise); Forget takes only the short `state_mu_`,
// so a lease's end never waits behind another task's collective.
#ifndef GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_
#define GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/gpu/nccl_communicator.h"
#include "runtime/group/job_group.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

// Where this call's device buffer is, for the agreement.
struct RankGpu {
  int cuda_device = -1;   // -1: simulated, or the call must stage (see nccl_capable)
  std::string_view node;  // with gpu_index, the GPU's identity: two ranks with the same share it
  int gpu_index = -1;
  bool whole_gpu = false;  // a whole GPU (not a MIG instance, an MPS share or a fraction)

  bool nccl_capable() const { return cuda_device >= 0 && whole_gpu; }
  friend bool operator==(const RankGpu& a, const RankGpu& b) {
    return a.cuda_device == b.cuda_device && a.node == b.node && a.gpu_index == b.gpu_index &&
           a.whole_gpu == b.whole_gpu;
  }
};

// What this rank passes to a device collective, agreed with the others before it runs.
struct DeviceCall {
  int64_t count = 0;        // elements (bytes for a broadcast)
  int element_code = 0;     // detail::ElementCode, or -1 for bytes
  int root = 0;             // a broadcast's root; 0 for an allreduce
  int op = -1;              // an allreduce's ReduceOp; -1 for a broadcast
  std::string invalid;      // non-empty: why this rank's arguments are wrong (every rank fails)
};

class RankDeviceComm {
 public:
  RankDeviceComm(JobGroup& group, absl::Duration timeout) : group_(group), timeout_(timeout) {}

  // Agrees with the other ranks on `call` and the path (every rank calls it before each device
  // collective, in the same order), then runs `op` with the communicator for `mine`, or with null
  // when the ranks stage this call through host memory. kInvalidArgument (on every rank) when the
  // ranks' calls differ or one is invalid.
  absl::Status WithComm(const RankGpu& mine, const DeviceCall& call, const NcclWait& wait,
                        absl::FunctionRef<absl::Status(NcclCommunicator*)> op) ABSL_LOCKS_EXCLUDED(op_mu_, state_mu_);

  // The lease on `node`/`gpu_index` ended: drop a communicator built on that GPU (the next device
  // collective rebuilds one, on every rank). Never waits for an operation.
  void Forget(std::string_view node, int gpu_index) ABSL_LOCKS_EXCLUDED(state_mu_);

  // How long each step may wait (RuntimeOptions::collective_timeout_s).
  absl::Duration timeout() const { return timeout_; }

 private:
  // The path level agreed, or kInvalidArgument naming the disagreement.
  absl::StatusOr<int> Agree(int level, const DeviceCall& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_);
  absl::Status Rebuild(const RankGpu& mine, const NcclWait& wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(op_mu_)
      ABSL_LOCKS_EXCLUDED(state_mu_);
  bool Unchanged(const RankGpu& mine) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);

  JobGroup& group_;
  const absl::Duration timeout_;

  Mutex op_mu_;  // one device collective at a time; taken before state_mu_
  mutable Mutex state_mu_;
  bool decided_ ABSL_GUARDED_BY(state_mu_) = false;  // a decision stands for built_for_
  // This rank's GPU when decided (the node's name copied: the view in RankGpu is the caller's).
  std::string built_node_ ABSL_GUARDED_BY(state_mu_);
  RankGpu built_for_ ABSL_GUARDED_BY(state_mu_);
  // Null: the ranks share a GPU. Shared: an operation holds its own reference while it runs, so a
  // Forget racing with it (a worker hears a lease ended after the driver gave its GPU to another
  // lease of the job) only drops this one; the last holder destroys the communicator.
  std::shared_ptr<NcclCommunicator> comm_ ABSL_GUARDED_BY(state_mu_);
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_
