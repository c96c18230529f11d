// The ranks' NCCL communicator (rank_device_comm.h).
#include "runtime/tasks/rank_device_comm.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpupool::runtime {
namespace {

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

NcclCommunicator* RankDeviceComm::Current(const RankGpu& mine) const {
  return Unchanged(mine) ? comm_.get() : nullptr;
}

absl::StatusOr<bool> RankDeviceComm::AgreeUnchanged(bool unchanged) {
  int32_t flag = unchanged ? 1 : 0;
  if (absl::Status s = group_.AllReduce(&flag, 1, ElementType::kInt32, ReduceOp::kMin); !s.ok()) return s;
  return flag == 1;
}

absl::StatusOr<NcclCommunicator*> RankDeviceComm::For(const RankGpu& mine, const NcclWait& wait) {
  const bool unchanged = Unchanged(mine);
  if (group_.size() == 1) {
    if (unchanged) return comm_.get();
  } else {
    absl::StatusOr<bool> all = AgreeUnchanged(unchanged);
    if (!all.ok()) return all.status();
    if (*all) return comm_.get();
  }
  comm_.reset();
  decided_ = false;
  // Every rank's GPU ("node/GPU index", or "" where NCCL cannot serve), from every rank: the same
  // list everywhere, so the same decision.
  const std::string key = mine.nccl_capable() ? absl::StrCat(std::string(mine.node), "/GPU ", mine.gpu_index) : "";
  std::set<std::string> distinct;
  bool nccl = true;
  for (int r = 0; r < group_.size(); ++r) {
    std::string theirs = r == group_.rank() ? key : "";
    if (absl::Status s = BroadcastString(group_, r, theirs); !s.ok()) return s;
    if (theirs.empty() || !distinct.insert(theirs).second) nccl = false;
  }
  if (nccl) {
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> built = Build(mine, wait);
    if (!built.ok()) return built.status();
    comm_ = *std::move(built);
  }
  decided_ = true;
  built_node_ = std::string(mine.node);
  built_for_ = mine;
  built_for_.node = built_node_;
  return comm_.get();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> RankDeviceComm::Build(const RankGpu& mine, const NcclWait& wait) {
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
  return NcclCommunicator::OverRanks(message.substr(1), group_.size(), group_.rank(), mine.cuda_device, init);
}

}  // namespace gpupool::runtime
