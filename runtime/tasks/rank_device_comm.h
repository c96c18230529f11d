// File: runtime/tasks/rank_device_comm.h
//
// The job's ranks' NCCL communicator for DeviceBuffer collectives (TaskContext::AllReduce and
// Broadcast on device memory), built over the job's control channel (JobGroup) by the first device
// collective that every rank can run on NCCL, and rebuilt when some rank's GPU changed or an
// operation failed.
//
// Agreement, before every device collective (so every rank makes the same group calls whatever its
// own buffer is): each rank says 0 (this call must stage through host memory: a simulated GPU, a
// MIG instance or a share of a GPU, or a buffer not on the task's GPU), 1 (NCCL could serve, but
// this rank has no communicator for its GPU) or 2 (NCCL, with the communicator it has); the
// minimum over the ranks decides for everyone. 1 rebuilds: every rank says which GPU it is on, and
// NCCL is used only when no two ranks share one (NCCL refuses that); rank 0 makes the unique id
// and the group broadcasts it. A job of one rank decides alone, with no message.
//
// Isolation: a communicator holds memory on its GPU outside the leases' budgets, so it is dropped
// (Forget) when the lease on that GPU ends, and only whole GPUs use NCCL.
//
// Thread-safe: a rank's tasks share it; an operation runs under its lock (WithComm), so a second
// task's device collective waits for the first, as the group's host collectives do.
#ifndef GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_
#define GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
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

class RankDeviceComm {
 public:
  RankDeviceComm(JobGroup& group, absl::Duration timeout) : group_(group), timeout_(timeout) {}

  // Agrees with the other ranks (every rank calls it before each device collective, in the same
  // order), then runs `op` under the lock with the communicator for `mine`, or with null when the
  // ranks stage this call through host memory. Errors of the agreement name it.
  absl::Status WithComm(const RankGpu& mine, const NcclWait& wait,
                        absl::FunctionRef<absl::Status(NcclCommunicator*)> op) ABSL_LOCKS_EXCLUDED(mu_);

  // The lease on `node`/`gpu_index` ended: drop a communicator built on that GPU (the next device
  // collective rebuilds one, on every rank).
  void Forget(std::string_view node, int gpu_index) ABSL_LOCKS_EXCLUDED(mu_);

  // How long each step may wait (RuntimeOptions::collective_timeout_s).
  absl::Duration timeout() const { return timeout_; }

 private:
  // 0, 1 or 2 (see the header comment), agreed over the ranks.
  absl::StatusOr<int> Agree(int mine) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Rebuild(const RankGpu& mine, const NcclWait& wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Unchanged(const RankGpu& mine) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobGroup& group_;
  const absl::Duration timeout_;

  Mutex mu_;
  bool decided_ ABSL_GUARDED_BY(mu_) = false;  // a decision stands for built_for_
  // This rank's GPU when decided (the node's name copied: the view in RankGpu is the caller's).
  std::string built_node_ ABSL_GUARDED_BY(mu_);
  RankGpu built_for_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<NcclCommunicator> comm_ ABSL_GUARDED_BY(mu_);  // null: the ranks share a GPU
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_
