// File: runtime/tasks/rank_device_comm.h
//
// The job's ranks' NCCL communicator for DeviceBuffer collectives (TaskContext::AllReduce and
// friends on device memory), built over the job's control channel (JobGroup) the first time a
// device collective runs, and rebuilt when some rank's GPU changed or an operation failed.
//
// Agreement: NCCL serves only when every rank's task runs on a real GPU that is not a MIG
// instance, and no two ranks share a GPU (NCCL refuses that). Each rank says which GPU it is on;
// all decide alike from the same list, so either every rank takes NCCL or every rank stages
// through host memory (For returns null). Rank 0 makes the unique id; the group broadcasts it.
// With several ranks, each later call first agrees (one host allreduce of a flag) that nobody's
// GPU changed since the build; a job of one rank needs no agreement.
//
// Thread-compatible, like the group's collectives: one task per rank uses them at a time, and
// every rank makes the same calls in the same order.
#ifndef GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_
#define GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/gpu/nccl_communicator.h"
#include "runtime/group/job_group.h"

namespace gpupool::runtime {

// Where this rank's task runs, for the agreement.
struct RankGpu {
  int cuda_device = -1;   // -1: simulated, or no GPU
  std::string_view node;  // with gpu_index, the GPU's identity: two ranks with the same share it
  int gpu_index = -1;
  bool mig = false;

  bool nccl_capable() const { return cuda_device >= 0 && !mig; }
  friend bool operator==(const RankGpu& a, const RankGpu& b) {
    return a.cuda_device == b.cuda_device && a.node == b.node && a.gpu_index == b.gpu_index && a.mig == b.mig;
  }
};

class RankDeviceComm {
 public:
  RankDeviceComm(JobGroup& group, absl::Duration timeout) : group_(group), timeout_(timeout) {}

  // The communicator for `mine`, or null when the ranks stage through host memory. Every rank
  // calls it before each device collective, in the same order.
  absl::StatusOr<NcclCommunicator*> For(const RankGpu& mine, const NcclWait& wait);

  // The communicator a device collective already set up for `mine`, without asking the other
  // ranks (point to point involves only two of them, so it cannot agree on one); null when none
  // stands. Both ends see the same unless a rank's GPU changed since the last device collective.
  NcclCommunicator* Current(const RankGpu& mine) const;

  // How long each step may wait (RuntimeOptions::collective_timeout_s).
  absl::Duration timeout() const { return timeout_; }

 private:
  // Whether a decision stands for `mine` (checked before every device collective: no strings).
  bool Unchanged(const RankGpu& mine) const;
  absl::StatusOr<bool> AgreeUnchanged(bool unchanged);
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> Build(const RankGpu& mine, const NcclWait& wait);

  JobGroup& group_;
  const absl::Duration timeout_;
  bool decided_ = false;   // a decision stands (until some rank's GPU changes)
  // This rank's GPU when decided (the node's name copied: the view in RankGpu is the caller's).
  std::string built_node_;
  RankGpu built_for_;
  std::unique_ptr<NcclCommunicator> comm_;  // null after deciding on the host path
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_TASKS_RANK_DEVICE_COMM_H_
