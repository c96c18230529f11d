// The ranks' NCCL communicator (rank_device_comm.h).
#include "runtime/tasks/rank_device_comm.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

constexpr int kStage = 0, kRebuild = 1, kUse = 2;

// One string from `root` to every rank (its size first, then its bytes).
absl::Status BroadcastString(JobGroup& group, int root, std::string& s) {
  uint64_t size = s.size();
  if (absl::Status st = group.Broadcast(root, &size, sizeof size); !st.ok()) return st;
  s.resize(size);
  return group.Broadcast(root, s.data(), s.size());
}

}  // namespace

bool RankDeviceComm::Unchanged(const RankGpu& mine) const {
  return decided_ && mine == built_for_ && (comm_ == nullptr || !comm_->broken());
}

absl::StatusOr<int> RankDeviceComm::Agree(int level, const DeviceCall& call) {
  const bool valid = call.invalid.empty();
  if (group_.size() == 1) {
    if (!valid) return absl::InvalidArgumentError(call.invalid);
    return level;
  }
  // Minima of each value and of its negation: equal everywhere exactly when min == -min(-x).
  const int64_t code = call.element_code, root = call.root, op = call.op;
  int64_t v[10] = {valid ? level : kStage, call.count, -call.count, code, -code, root, -root, valid ? 1 : 0, op, -op};
  if (absl::Status s = group_.AllReduce(v, 10, ElementType::kInt64, ReduceOp::kMin); !s.ok()) return s;
  if (v[7] == 0) {
    return absl::InvalidArgumentError(valid ? "another rank's arguments to this collective are invalid" : call.invalid);
  }
  if (v[1] != -v[2]) {
    return absl::InvalidArgumentError(absl::StrCat("the ranks pass different sizes to this collective (this rank: ",
                                                   call.count, ", others from ", v[1], " to ", -v[2], ")"));
  }
  if (v[3] != -v[4]) return absl::InvalidArgumentError("the ranks pass different element types to this collective");
  if (v[5] != -v[6]) {
    return absl::InvalidArgumentError(absl::StrCat("the ranks name different roots (this rank: ", call.root, ")"));
  }
  if (v[8] != -v[9]) return absl::InvalidArgumentError("the ranks reduce with different operations (sum, max, min)");
  return static_cast<int>(v[0]);
}

absl::Status RankDeviceComm::WithComm(const RankGpu& mine, const DeviceCall& call, const NcclWait& wait,
                                      absl::FunctionRef<absl::Status(NcclCommunicator*)> op) {
  MutexLock op_lock(&op_mu_);
  int level;
  {
    MutexLock lock(&state_mu_);
    level = !mine.nccl_capable() ? kStage : Unchanged(mine) ? kUse : kRebuild;
  }
  absl::StatusOr<int> agreed = Agree(level, call);
  if (!agreed.ok()) return agreed.status();
  if (*agreed == kStage) return op(nullptr);
  if (*agreed == kRebuild) {
    if (absl::Status s = Rebuild(mine, wait); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("setting up the ranks' NCCL communicator: ", s.message()));
    }
  }
  std::shared_ptr<NcclCommunicator> comm;  // held while op runs (see comm_)
  {
    MutexLock lock(&state_mu_);
    comm = comm_;
  }
  return op(comm.get());
}

absl::Status RankDeviceComm::Rebuild(const RankGpu& mine, const NcclWait& wait) {
  std::shared_ptr<NcclCommunicator> old;
  {
    MutexLock lock(&state_mu_);
    old = std::move(comm_);
    decided_ = false;
  }
  old.reset();  // outside the lock: destroying waits for NCCL
  // Every rank's GPU, from every rank: the same list everywhere, so the same decision.
  const std::string key = absl::StrCat(std::string(mine.node), "/GPU ", mine.gpu_index);
  std::set<std::string> distinct;
  bool nccl = true;
  for (int r = 0; r < group_.size(); ++r) {
    std::string theirs = r == group_.rank() ? key : "";
    if (absl::Status s = BroadcastString(group_, r, theirs); !s.ok()) return s;
    if (!distinct.insert(theirs).second) nccl = false;
  }
  std::shared_ptr<NcclCommunicator> built;
  if (nccl) {
    // Rank 0's id, or its reason for having none (so every rank fails alike): "1" + id, or "0" + why.
    std::string message;
    if (group_.rank() == 0) {
      absl::StatusOr<std::string> id = NcclCommunicator::UniqueId();
      message = id.ok() ? "1" + *id : "0" + std::string(id.status().message());
    }
    if (absl::Status s = BroadcastString(group_, 0, message); !s.ok()) return s;
    if (message.empty() || message[0] != '1') {
      return absl::UnavailableError(absl::StrCat("rank 0 could not make an NCCL id: ", message.substr(1)));
    }
    // A deadline of its own from now: the caller's was set before it waited for op_mu_.
    NcclWait init = wait;
    init.deadline = absl::Now() + timeout_;
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> made =
        NcclCommunicator::OverRanks(message.substr(1), group_.size(), group_.rank(), mine.cuda_device, init);
    if (!made.ok()) return made.status();
    built = *std::move(made);
  }
  MutexLock lock(&state_mu_);
  comm_ = std::move(built);
  decided_ = true;
  built_node_ = std::string(mine.node);
  built_for_ = mine;
  built_for_.node = built_node_;
  return absl::OkStatus();
}

void RankDeviceComm::Forget(std::string_view node, int gpu_index) {
  std::shared_ptr<NcclCommunicator> dropping;  // destroyed outside the lock, or by an operation still holding it
  {
    MutexLock lock(&state_mu_);
    if (!decided_ || built_for_.node != node || built_for_.gpu_index != gpu_index) return;
    dropping = std::move(comm_);
    decided_ = false;
  }
}

}  // namespace gpupool::runtime
