// NCCL communicators (nccl_communicator.h). Rank communicators are created nonblocking
// (ncclConfig_t::blocking = 0) so that a rank that never joins turns into a deadline, not a hang;
// device communicators (ncclCommInitAll) are all in this process and cannot wait on anyone.
#include "runtime/gpu/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/gpu/current_device_guard.h"

namespace gpupool::runtime {
namespace {

absl::Status NcclError(ncclResult_t r, const std::string& what, ncclComm_t comm = nullptr) {
  std::string detail = ncclGetErrorString(r);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') absl::StrAppend(&detail, " (", last, ")");
  const std::string message = absl::StrCat(what, ": NCCL ", detail);
  // The caller's mistake, not a failure of the GPUs or the network.
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) return absl::InvalidArgumentError(message);
  return absl::UnavailableError(message);
}

absl::Status CudaError(cudaError_t e, const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": CUDA ", cudaGetErrorString(e)));
}

absl::StatusOr<ncclDataType_t> NcclType(int element_code) {
  switch (element_code) {
    case detail::ElementCode<float>::value: return ncclFloat32;
    case detail::ElementCode<double>::value: return ncclFloat64;
    case detail::ElementCode<int32_t>::value: return ncclInt32;
    case detail::ElementCode<int64_t>::value: return ncclInt64;
  }
  return absl::InvalidArgumentError(absl::StrCat("no NCCL type for element code ", element_code));
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kSum: break;
  }
  return ncclSum;
}

size_t TypeSize(ncclDataType_t t) { return t == ncclFloat64 || t == ncclInt64 ? 8 : 4; }

}  // namespace

struct NcclCommunicator::Member {
  ncclComm_t comm = nullptr;
  int device = -1;
};

NcclCommunicator::NcclCommunicator() = default;

NcclCommunicator::~NcclCommunicator() {
  CurrentDeviceGuard keep;
  for (const std::unique_ptr<Member>& m : members_) {
    if (m->comm == nullptr) continue;
    cudaSetDevice(m->device);
    // A communicator whose operation failed may have kernels waiting on peers: abort, which ends
    // them; a healthy one is destroyed (its operations have all completed: Await waited).
    if (broken_.ok()) {
      ncclCommDestroy(m->comm);
    } else {
      ncclCommAbort(m->comm);
    }
  }
}

absl::StatusOr<std::string> NcclCommunicator::Version() {
  int v = 0;
  ncclResult_t r = ncclGetVersion(&v);
  if (r != ncclSuccess) return NcclError(r, "ncclGetVersion");
  // NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch.
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

absl::StatusOr<std::string> NcclCommunicator::UniqueId() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclError(r, "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::OverDevices(
    const std::vector<int>& cuda_devices) {
  if (cuda_devices.empty()) return absl::InvalidArgumentError("an NCCL communicator over no GPUs");
  std::set<int> distinct(cuda_devices.begin(), cuda_devices.end());
  if (distinct.size() != cuda_devices.size() || *distinct.begin() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL needs distinct real GPUs, got CUDA devices [",
                                                   absl::StrJoin(cuda_devices, ", "), "]"));
  }
  std::vector<ncclComm_t> comms(cuda_devices.size());
  CurrentDeviceGuard keep;
  ncclResult_t r = ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), cuda_devices.data());
  if (r != ncclSuccess) {
    return NcclError(r, absl::StrCat("ncclCommInitAll over CUDA devices [", absl::StrJoin(cuda_devices, ", "), "]"));
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->devices_ = cuda_devices;
  c->ranks_ = static_cast<int>(cuda_devices.size());
  for (size_t i = 0; i < comms.size(); ++i) {
    auto m = std::make_unique<Member>();
    m->comm = comms[i];
    m->device = cuda_devices[i];
    c->members_.push_back(std::move(m));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::OverRanks(const std::string& unique_id,
                                                                               int ranks, int rank,
                                                                               int cuda_device,
                                                                               const NcclWait& wait) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof id.internal) {
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL unique id is ", sizeof id.internal, " bytes, got ", unique_id.size()));
  }
  if (ranks < 1 || rank < 0 || rank >= ranks || cuda_device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank, " of ", ranks, " on CUDA device ", cuda_device));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  CurrentDeviceGuard keep;
  cudaError_t e = cudaSetDevice(cuda_device);
  if (e != cudaSuccess) return CudaError(e, absl::StrCat("cudaSetDevice(", cuda_device, ")"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->devices_ = {cuda_device};
  c->ranks_ = ranks;
  auto m = std::make_unique<Member>();
  m->device = cuda_device;
  ncclResult_t r = ncclCommInitRankConfig(&m->comm, ranks, id, rank, &config);
  c->members_.push_back(std::move(m));
  const std::string what = absl::StrCat("ncclCommInitRank (rank ", rank, " of ", ranks, ")");
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclError(r, what, c->members_[0]->comm);
    c->Abort(s);
    return s;
  }
  absl::Status s = c->Await({}, /*pending=*/true, wait, [&] { return what; });
  if (!s.ok()) return s;
  return c;
}

absl::Status NcclCommunicator::CheckBuffers(absl::Span<const NcclBuffer> buffers, const char* what) const {
  if (!broken_.ok()) {
    return absl::Status(broken_.code(), absl::StrCat(what, ": the communicator is broken: ", broken_.message()));
  }
  if (buffers.size() != members_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", buffers.size(), " buffers for ", members_.size(), " GPUs"));
  }
  for (const NcclBuffer& b : buffers) {
    if (b.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": a buffer has no memory"));
  }
  return absl::OkStatus();
}

void NcclCommunicator::Abort(absl::Status why) {
  if (broken_.ok()) broken_ = std::move(why);
  CurrentDeviceGuard keep;
  for (const std::unique_ptr<Member>& m : members_) {
    if (m->comm == nullptr) continue;
    cudaSetDevice(m->device);
    ncclCommAbort(m->comm);
    m->comm = nullptr;
  }
}

absl::Status NcclCommunicator::Await(absl::Span<const NcclBuffer> buffers, bool pending, const NcclWait& wait,
                                     absl::FunctionRef<std::string()> what) {
  // Fails with the members' asynchronous error, if one has one; `ready` says whether all are.
  auto members_state = [&](bool& ready) -> absl::Status {
    ready = true;
    for (const std::unique_ptr<Member>& m : members_) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(m->comm, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclInProgress) {
        ready = false;
      } else if (state != ncclSuccess) {
        absl::Status s = NcclError(state, what(), m->comm);
        Abort(s);
        return s;
      }
    }
    return absl::OkStatus();
  };
  // Spin first (a small collective completes in microseconds, and a sleep would double it), then
  // poll every 50 us so a long wait does not burn a core. The clock is read only once waiting.
  std::optional<std::chrono::steady_clock::time_point> spin_until;
  for (;;) {
    bool ready = true;
    if (pending) {
      if (absl::Status s = members_state(ready); !s.ok()) return s;
      pending = !ready;
    }
    if (!pending) {
      bool done = true;
      for (size_t i = 0; done && i < buffers.size(); ++i) {
        cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(buffers[i].stream));
        if (e == cudaErrorNotReady) {
          done = false;
        } else if (e != cudaSuccess) {
          absl::Status s = CudaError(e, what());
          Abort(s);
          return s;
        }
      }
      if (done) return absl::OkStatus();
      // Still running: a member's asynchronous error (a lost peer, NCCL's own timeout) ends it.
      if (absl::Status s = members_state(ready); !s.ok()) return s;
    }
    if (wait.stop && wait.stop()) {
      absl::Status s = absl::AbortedError(absl::StrCat(what(), ": given up (lease revoked or task cancelled); "
                                                       "the communicator was aborted"));
      Abort(s);
      return s;
    }
    if (absl::Now() >= wait.deadline) {
      absl::Status s = absl::DeadlineExceededError(
          absl::StrCat(what(), ": not complete by its deadline (a member never arrived?); the communicator was aborted"));
      Abort(s);
      return s;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!spin_until) spin_until = now + std::chrono::milliseconds(2);
    if (now < *spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// Launches one call per member: in an NCCL group when there are several (one thread drives them
// all), directly when there is one (a group adds its own bookkeeping to every call).
template <typename Call>
int NcclCommunicator::Launch(Call call) {
  const bool group = members_.size() > 1;
  std::optional<CurrentDeviceGuard> keep;  // several members: NCCL may leave another device current
  if (group) {
    keep.emplace();
    ncclGroupStart();
  }
  ncclResult_t r = ncclSuccess;
  for (size_t i = 0; i < members_.size() && (r == ncclSuccess || r == ncclInProgress); ++i) r = call(i, members_[i]->comm);
  if (group) {
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = end;
  }
  return r;
}

absl::Status NcclCommunicator::Finish(int launched_code, absl::Span<const NcclBuffer> buffers,
                                      const NcclWait& wait, absl::FunctionRef<std::string()> what) {
  const auto launched = static_cast<ncclResult_t>(launched_code);
  if (launched != ncclSuccess && launched != ncclInProgress) {
    absl::Status s = NcclError(launched, what(), members_[0]->comm);
    Abort(s);
    return s;
  }
  return Await(buffers, launched == ncclInProgress, wait, what);
}

absl::Status NcclCommunicator::AllReduce(absl::Span<const NcclBuffer> buffers, size_t count, int element_code,
                                         ReduceOp op, const NcclWait& wait) {
  if (absl::Status s = CheckBuffers(buffers, "NCCL allreduce"); !s.ok()) return s;
  absl::StatusOr<ncclDataType_t> type = NcclType(element_code);
  if (!type.ok()) return type.status();
  int r = Launch([&](size_t i, ncclComm_t comm) {
    return ncclAllReduce(buffers[i].data, buffers[i].data, count, *type, NcclOp(op), comm,
                         static_cast<cudaStream_t>(buffers[i].stream));
  });
  return Finish(r, buffers, wait, [&] { return absl::StrCat("NCCL allreduce of ", count * TypeSize(*type), " bytes"); });
}

absl::Status NcclCommunicator::Broadcast(absl::Span<const NcclBuffer> buffers, size_t bytes, int root,
                                         const NcclWait& wait) {
  if (absl::Status s = CheckBuffers(buffers, "NCCL broadcast"); !s.ok()) return s;
  if (absl::Status s = CheckRank(root, "broadcast"); !s.ok()) return s;
  int r = Launch([&](size_t i, ncclComm_t comm) {
    return ncclBroadcast(buffers[i].data, buffers[i].data, bytes, ncclUint8, root, comm,
                         static_cast<cudaStream_t>(buffers[i].stream));
  });
  return Finish(r, buffers, wait, [&] { return absl::StrCat("NCCL broadcast of ", bytes, " bytes from ", root); });
}

absl::Status NcclCommunicator::Send(const NcclBuffer& buffer, size_t bytes, int peer, const NcclWait& wait) {
  return PointToPoint(/*send=*/true, buffer, bytes, peer, wait);
}

absl::Status NcclCommunicator::Recv(const NcclBuffer& buffer, size_t bytes, int peer, const NcclWait& wait) {
  return PointToPoint(/*send=*/false, buffer, bytes, peer, wait);
}

absl::Status NcclCommunicator::PointToPoint(bool send, const NcclBuffer& buffer, size_t bytes, int peer,
                                            const NcclWait& wait) {
  const char* verb = send ? "send" : "recv";
  absl::Span<const NcclBuffer> one(&buffer, 1);
  if (absl::Status s = CheckBuffers(one, send ? "NCCL send" : "NCCL recv"); !s.ok()) return s;
  if (absl::Status s = CheckRank(peer, verb); !s.ok()) return s;
  int r = Launch([&](size_t, ncclComm_t comm) {
    auto stream = static_cast<cudaStream_t>(buffer.stream);
    return send ? ncclSend(buffer.data, bytes, ncclUint8, peer, comm, stream)
                : ncclRecv(buffer.data, bytes, ncclUint8, peer, comm, stream);
  });
  return Finish(r, one, wait, [&] {
    return absl::StrCat("NCCL ", verb, " of ", bytes, " bytes ", send ? "to" : "from", " rank ", peer);
  });
}

absl::Status NcclCommunicator::CheckRank(int rank, const char* verb) const {
  if (rank >= 0 && rank < ranks_) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("NCCL ", verb, " with rank ", rank, ": no such rank (", ranks_, " ranks)"));
}

}  // namespace gpupool::runtime
