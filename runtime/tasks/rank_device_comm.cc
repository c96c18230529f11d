// The ranks' NCCL communicator (rank_device_comm.h).
#include "runtime/tasks/rank_device_comm.h"

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

absl::Status SettingUp(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("setting up the ranks' NCCL communicator: ", s.message()));
}

}  // namespace

bool RankDeviceComm::Unchanged(const RankGpu& mine) const {
  return decided_ && mine == built_for_ && (comm_ == nullptr || !comm_->broken());
}

absl::StatusOr<int> RankDeviceComm::Agree(int mine) {
  if (group_.size() == 1) return mine;
  int32_t level = mine;
  if (absl::Status s = group_.AllReduce(&level, 1, ElementType::kInt32, ReduceOp::kMin); !s.ok()) return s;
  return level;
}

absl::Status RankDeviceComm::WithComm(const RankGpu& mine, const NcclWait& wait,
                                      absl::FunctionRef<absl::Status(NcclCommunicator*)> op) {
  MutexLock lock(&mu_);
  const int level = !mine.nccl_capable() ? kStage : Unchanged(mine) ? kUse : kRebuild;
  absl::StatusOr<int> agreed = Agree(level);
  if (!agreed.ok()) return SettingUp(agreed.status());
  if (*agreed == kStage) return op(nullptr);
  if (*agreed == kRebuild) {
    if (absl::Status s = Rebuild(mine, wait); !s.ok()) return SettingUp(s);
  }
  return op(comm_.get());
}

absl::Status RankDeviceComm::Rebuild(const RankGpu& mine, const NcclWait& wait) {
  comm_.reset();
  decided_ = false;
  // Every rank's GPU, from every rank: the same list everywhere, so the same decision.
  const std::string key = absl::StrCat(std::string(mine.node), "/GPU ", mine.gpu_index);
  std::set<std::string> distinct;
  bool nccl = true;
  for (int r = 0; r < group_.size(); ++r) {
    std::string theirs = r == group_.rank() ? key : "";
    if (absl::Status s = BroadcastString(group_, r, theirs); !s.ok()) return s;
    if (!distinct.insert(theirs).second) nccl = false;
  }
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
    NcclWait init = wait;
    init.deadline = std::min(wait.deadline, absl::Now() + timeout_);
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> built =
        NcclCommunicator::OverRanks(message.substr(1), group_.size(), group_.rank(), mine.cuda_device, init);
    if (!built.ok()) return built.status();
    comm_ = *std::move(built);
  }
  decided_ = true;
  built_node_ = std::string(mine.node);
  built_for_ = mine;
  built_for_.node = built_node_;
  return absl::OkStatus();
}

void RankDeviceComm::Forget(std::string_view node, int gpu_index) {
  MutexLock lock(&mu_);
  if (decided_ && built_for_.node == node && built_for_.gpu_index == gpu_index) {
    comm_.reset();
    decided_ = false;
  }
}

}  // namespace gpupool::runtime
