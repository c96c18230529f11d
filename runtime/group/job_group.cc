#include "runtime/group/job_group.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "transport/host_communicator.h"
#include "transport/ucx_worker.h"

namespace gpupool::runtime {

size_t ElementSize(ElementType type) {
  switch (type) {
    case ElementType::kFloat: return sizeof(float);
    case ElementType::kDouble: return sizeof(double);
    case ElementType::kInt32: return sizeof(int32_t);
    case ElementType::kInt64: return sizeof(int64_t);
  }
  return 1;
}

namespace {

transport::ReduceOp ToTransport(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return transport::ReduceOp::kSum;
    case ReduceOp::kMax: return transport::ReduceOp::kMax;
    case ReduceOp::kMin: return transport::ReduceOp::kMin;
  }
  return transport::ReduceOp::kSum;
}

template <typename T>
void Combine(void* into, const void* from, size_t count, ReduceOp op) {
  transport::ReducerFor<T>(ToTransport(op))(static_cast<std::byte*>(into), static_cast<const std::byte*>(from), count);
}

template <typename T>
absl::Status Reduce(transport::HostCommunicator& comm, void* data, size_t count, ReduceOp op) {
  return comm.AllReduce(absl::MakeSpan(static_cast<T*>(data), count), ToTransport(op));
}

// A failed rank announces itself with this prefix instead of an address.
constexpr char kFailed = '!';

}  // namespace

void CombineElements(void* into, const void* from, size_t count, ElementType type, ReduceOp op) {
  switch (type) {
    case ElementType::kFloat: return Combine<float>(into, from, count, op);
    case ElementType::kDouble: return Combine<double>(into, from, count, op);
    case ElementType::kInt32: return Combine<int32_t>(into, from, count, op);
    case ElementType::kInt64: return Combine<int64_t>(into, from, count, op);
  }
}

JobGroup::JobGroup(int rank, int size) : rank_(rank), size_(size) {}

std::unique_ptr<JobGroup> JobGroup::Solo() { return std::unique_ptr<JobGroup>(new JobGroup(0, 1)); }

absl::StatusOr<std::unique_ptr<JobGroup>> JobGroup::OverUcx(int rank, int ranks, const AllGather& all_gather,
                                                            JobGroupOptions options) {
  if (rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in a group of ", ranks));
  }
  std::unique_ptr<JobGroup> group(new JobGroup(rank, ranks));
  absl::StatusOr<std::unique_ptr<transport::UcxWorker>> worker = transport::UcxWorker::Create(
      transport::UcxOptions{.net_devices = options.net_devices, .name = absl::StrCat("rank ", rank)});
  std::string mine = worker.ok() ? (*worker)->address() : absl::StrCat(std::string(1, kFailed), worker.status().message());
  absl::StatusOr<std::vector<std::string>> addresses = all_gather(std::move(mine));
  if (!addresses.ok()) return addresses.status();
  if (static_cast<int>(addresses->size()) != ranks) {
    return absl::InternalError(absl::StrCat("the address exchange returned ", addresses->size(), " entries for ", ranks, " ranks"));
  }
  for (int r = 0; r < ranks; ++r) {
    const std::string& a = (*addresses)[r];
    if (a.empty() || a[0] == kFailed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " could not start its UCX worker for the job's collectives: ", a.empty() ? "no address" : a.substr(1)));
    }
  }
  group->worker_ = *std::move(worker);
  group->addresses_ = *addresses;
  group->places_ = std::move(options.places);
  absl::StatusOr<std::unique_ptr<transport::HostCommunicator>> comm = transport::HostCommunicator::Create(
      *group->worker_, rank, *std::move(addresses),
      transport::HostCommunicatorOptions{.timeout = options.collective_timeout});
  if (!comm.ok()) {
    return absl::Status(comm.status().code(),
                        absl::StrCat("connecting the job's ranks for collectives: ", comm.status().message()));
  }
  group->comm_ = *std::move(comm);
  return group;
}

JobGroup::~JobGroup() {
  comm_.reset();  // before the worker it runs on
  worker_.reset();
}

absl::Status JobGroup::CheckPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", peer, " is not in the job (ranks 0..", size_ - 1, ")"));
  }
  return absl::OkStatus();
}

absl::Status JobGroup::CheckMessage(int peer, uint64_t tag, const char* what) const {
  if (absl::Status s = CheckPeer(peer, what); !s.ok()) return s;
  if (tag >= transport::kReservedTags) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": tag ", tag, " is reserved for collectives (use tags below 2^63)"));
  }
  return absl::OkStatus();
}

absl::Status JobGroup::AllReduce(void* data, size_t count, ElementType type, ReduceOp op) {
  MutexLock lock(&mu_);
  if (comm_ == nullptr) return absl::OkStatus();  // a group of one: the data is already the result
  switch (type) {
    case ElementType::kFloat: return Reduce<float>(*comm_, data, count, op);
    case ElementType::kDouble: return Reduce<double>(*comm_, data, count, op);
    case ElementType::kInt32: return Reduce<int32_t>(*comm_, data, count, op);
    case ElementType::kInt64: return Reduce<int64_t>(*comm_, data, count, op);
  }
  return absl::InvalidArgumentError("allreduce: unknown element type");
}

absl::Status JobGroup::Broadcast(int root, void* data, size_t bytes) {
  if (absl::Status s = CheckPeer(root, "broadcast"); !s.ok()) return s;
  MutexLock lock(&mu_);
  if (comm_ == nullptr) return absl::OkStatus();
  return comm_->Broadcast(root, absl::MakeSpan(static_cast<std::byte*>(data), bytes));
}

absl::Status JobGroup::Send(int dst, uint64_t tag, const void* data, size_t bytes) {
  if (absl::Status s = CheckMessage(dst, tag, "send"); !s.ok()) return s;
  MutexLock lock(&mu_);
  if (comm_ == nullptr) {
    to_self_[tag].emplace_back(static_cast<const char*>(data), bytes);
    return absl::OkStatus();
  }
  return comm_->Send(dst, tag, absl::MakeConstSpan(static_cast<const std::byte*>(data), bytes));
}

absl::StatusOr<size_t> JobGroup::Recv(int src, uint64_t tag, void* data, size_t capacity) {
  if (absl::Status s = CheckMessage(src, tag, "recv"); !s.ok()) return s;
  MutexLock lock(&mu_);
  if (comm_ == nullptr) {
    auto it = to_self_.find(tag);
    if (it == to_self_.end() || it->second.empty()) {
      // Nothing else can send to a group of one: waiting would wait forever.
      return absl::FailedPreconditionError(absl::StrCat("recv: no message with tag ", tag,
                                                        " was sent to this rank, and it is the job's only one"));
    }
    std::string message = std::move(it->second.front());
    it->second.pop_front();
    if (message.size() > capacity) {
      return absl::OutOfRangeError(absl::StrCat("recv: the message has ", message.size(), " bytes, the buffer ", capacity));
    }
    std::memcpy(data, message.data(), message.size());
    return message.size();
  }
  return comm_->Recv(src, tag, absl::MakeSpan(static_cast<std::byte*>(data), capacity));
}

}  // namespace gpupool::runtime
