// TaskContext and DeviceBuffer: what a running task reads and allocates, over the job runtime's
// lease bookkeeping and the per-GPU memory pools.
#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "gpupool/task_context.h"
#include "runtime/tasks/status_to_error.h"
#include "runtime/gpu/device_copy.h"
#include "runtime/gpu/nccl_communicator.h"
#include "runtime/tasks/rank_device_comm.h"
#include "runtime/group/job_group.h"
#include "runtime/tasks/job_runtime.h"
#include "runtime/tasks/lease_run.h"
#include "runtime/objects/object_exchange.h"

namespace gpupool {
namespace {
const std::vector<SlotInfo>& NoSlots() {
  static const std::vector<SlotInfo>* none = new std::vector<SlotInfo>();
  return *none;
}
}  // namespace

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : block_(std::exchange(o.block_, nullptr)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer dying(std::move(*this));
    block_ = std::exchange(o.block_, nullptr);
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() {
  if (block_ != nullptr) block_->pool->Free(block_);
}
void* DeviceBuffer::data() const { return block_ != nullptr ? block_->ptr : nullptr; }
uint64_t DeviceBuffer::size() const { return block_ != nullptr ? block_->size : 0; }
int DeviceBuffer::cuda_device() const { return block_ != nullptr ? block_->pool->cuda_device() : -1; }

const std::string& TaskContext::task_name() const { return state_->task->name(); }
uint64_t TaskContext::task_id() const { return state_->task->id; }
const std::string& TaskContext::team() const { return state_->task->shape->team; }
int TaskContext::attempt() const { return state_->task->attempt; }

const std::vector<SlotInfo>& TaskContext::slots() const {
  return state_->lease != nullptr ? state_->lease->slots : NoSlots();
}
int TaskContext::cuda_device() const {
  const runtime::SlotMemory* m = state_->lease != nullptr ? state_->lease->first_memory() : nullptr;
  return m != nullptr ? m->pool->cuda_device() : -1;
}
void* TaskContext::stream() const { return state_->lease != nullptr && !state_->lease->memory.empty() ? slot_stream(0) : nullptr; }
void* TaskContext::slot_stream(size_t slot) const {
  if (state_->lease == nullptr || slot >= state_->lease->memory.size()) return nullptr;
  const runtime::SlotMemory& m = state_->lease->memory[slot];
  if (m.pool == nullptr) return nullptr;
  return m.work_stream();
}
uint64_t TaskContext::memory_budget_bytes() const {
  const runtime::SlotMemory* m = state_->lease != nullptr ? state_->lease->first_memory() : nullptr;
  return m != nullptr ? m->budget->limit_bytes : 0;
}
uint64_t TaskContext::memory_used_bytes() const {
  const runtime::SlotMemory* m = state_->lease != nullptr ? state_->lease->first_memory() : nullptr;
  return m != nullptr ? m->budget->used_bytes.load() : 0;
}

DeviceBuffer TaskContext::Allocate(uint64_t bytes) {
  if (state_->lease == nullptr || state_->lease->memory.empty()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "task '" + task_name() + "' has no GPU: give it Gpus(...) to allocate device memory");
  }
  return Allocate(bytes, 0);
}

DeviceBuffer TaskContext::Allocate(uint64_t bytes, size_t slot) {
  runtime::LeaseRun* lease = state_->lease;
  if (lease == nullptr || lease->memory.empty()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "task '" + task_name() + "' has no GPU: give it Gpus(...) to allocate device memory");
  }
  if (slot >= lease->memory.size()) {
    throw Error(ErrorCode::kOutOfRange, "task '" + task_name() + "': slot " + std::to_string(slot) +
                                            " of a lease of " + std::to_string(lease->memory.size()));
  }
  runtime::SlotMemory& m = lease->memory[slot];
  if (m.pool == nullptr) {
    throw Error(ErrorCode::kFailedPrecondition, "task '" + task_name() + "': slot " + std::to_string(slot) +
                                                    "'s GPU is not this process's");
  }
  return DeviceBuffer(runtime::ValueOrThrow(m.pool->Allocate(m.budget, bytes)));
}

bool TaskContext::cancelled() const {
  return state_->task->cancelled.load(std::memory_order_relaxed) ||
         (state_->lease != nullptr && state_->lease->stop.load(std::memory_order_relaxed));
}

void TaskContext::Step() { state_->runtime->SafePoint(*state_); }

int64_t TaskContext::Checkpointable(std::vector<StateRegion> state) {
  for (const StateRegion& r : state) {
    if (r.data == nullptr && r.bytes > 0) {
      throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': a StateRegion has no memory");
    }
  }
  state_->regions = std::move(state);
  return state_->runtime->MakeCheckpointable(*state_);
}

int64_t TaskContext::Checkpointable(std::function<std::string()> save, std::function<void(std::string_view)> load) {
  if (!save || !load) {
    throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Checkpointable needs both save and load");
  }
  state_->save = std::move(save);
  state_->load = std::move(load);
  return state_->runtime->MakeCheckpointable(*state_);
}

bool TaskContext::resumed() const { return state_->resumed; }
int64_t TaskContext::step() const { return state_->step; }

double TaskContext::pool_time_s() const { return state_->runtime->pool().Now(); }

void TaskContext::SleepPoolTime(double seconds) {
  if (seconds <= 0) return;
  double real = seconds / state_->runtime->clock_speed();
  std::this_thread::sleep_for(std::chrono::duration<double>(real));
}

int TaskContext::rank() const { return state_->runtime->group().rank(); }
int TaskContext::ranks() const { return state_->runtime->group().size(); }

namespace {

// What a device collective of this task waits for. It is given up (and its communicator aborted)
// when the task is cancelled, its lease is lost, the runtime stops, or a revoked lease's grace
// period is about to run out; not at the revocation itself, which leaves the task its grace period to
// reach a safe point, collectives included.
runtime::NcclWait WaitFor(detail::TaskState* state) {
  runtime::JobRuntime& rt = *state->runtime;
  return runtime::NcclWait{
      .deadline = absl::Now() + rt.device_comm().timeout(),
      .stop = [state, &rt] {
        if (state->task->cancelled.load(std::memory_order_relaxed)) return true;
        const runtime::LeaseRun* lease = state->lease;
        if (lease == nullptr) return false;
        if (lease->lost.load(std::memory_order_relaxed)) return true;
        // A pool second before the deadline, so the abort and the release still land within it.
        if (lease->revoked.load(std::memory_order_acquire)) return rt.pool().Now() >= lease->revoke_deadline_s.load() - 1.0;
        return lease->stop.load(std::memory_order_relaxed);  // the runtime is stopping
      }};
}

// A whole GPU (not a MIG instance, an MPS share or a fraction): what NCCL may run on. A
// communicator's memory lies outside the lease's budget, so shares of a GPU stay on the host path.
bool WholeGpu(const SlotInfo& slot) { return slot.kind == "whole"; }

}  // namespace

void* TaskContext::StreamOf(const DeviceBuffer& buffer) {
  return buffer.block_->stream != nullptr ? buffer.block_->stream : buffer.block_->pool->stream();
}

void TaskContext::WithRankComm(int cuda_device, const runtime::DeviceCall& call,
                               void (*op)(void* context, runtime::NcclCommunicator* comm), void* context) {
  runtime::RankGpu mine;
  runtime::LeaseRun* lease = state_->lease;
  // NCCL only for a buffer on the task's own (first) GPU: the ranks' communicator is built there.
  if (lease != nullptr && lease->first_memory() != nullptr && cuda_device >= 0 && cuda_device == this->cuda_device()) {
    const SlotInfo& slot = lease->slots.front();
    mine.cuda_device = cuda_device;
    mine.node = slot.node;
    mine.gpu_index = slot.gpu_index;
    mine.whole_gpu = WholeGpu(slot);
  }
  // Every rank agrees before every device collective, whatever its own buffer (a simulated one
  // included), so all make the same group calls.
  absl::Status s = state_->runtime->device_comm().WithComm(mine, call, WaitFor(state_), [&](runtime::NcclCommunicator* comm) {
    op(context, comm);
    return absl::OkStatus();
  });
  if (!s.ok()) runtime::ThrowIfError(absl::Status(s.code(), "task '" + task_name() + "': " + std::string(s.message())));
}

void TaskContext::ReduceHost(void* data, size_t count, int element_code, ReduceOp op) {
  if (count == 0) return;
  if (data == nullptr) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': AllReduce of no memory");
  runtime::ThrowIfError(state_->runtime->group().AllReduce(data, count, static_cast<runtime::ElementType>(element_code), op));
}

void TaskContext::ReduceDevice(DeviceBuffer& buffer, size_t count, int element_code, ReduceOp op) {
  runtime::JobGroup& group = state_->runtime->group();
  const auto type = static_cast<runtime::ElementType>(element_code);
  void* data = buffer.data();
  void* stream = buffer.empty() ? nullptr : StreamOf(buffer);
  const int cuda_device = buffer.cuda_device();
  // Checked in the agreement, so that every rank fails alike rather than one leaving the others
  // waiting in it.
  runtime::DeviceCall call{.count = static_cast<int64_t>(count), .element_code = element_code, .op = static_cast<int>(op)};
  if (buffer.empty()) call.invalid = "task '" + task_name() + "': AllReduce of an empty DeviceBuffer";
  // NCCL when every rank can take it; else staged through pinned host memory after the kernels
  // queued on the buffer's stream, reduced there, copied back (a simulated buffer is host memory).
  auto reduce = [&](runtime::NcclCommunicator* comm) {
    if (count == 0) return;
    if (comm != nullptr) {
      runtime::ThrowIfError(comm->AllReduce({runtime::NcclBuffer{data, stream}}, count, element_code, op, WaitFor(state_)));
      return;
    }
    if (cuda_device < 0) {
      runtime::ThrowIfError(group.AllReduce(data, count, type, op));
      return;
    }
    const uint64_t bytes = count * runtime::ElementSize(type);
    runtime::PinnedHostBuffer staging(bytes);
    runtime::ThrowIfError(runtime::CopyDeviceToHost(staging.data(), data, bytes, cuda_device, stream));
    runtime::ThrowIfError(group.AllReduce(staging.data(), count, type, op));
    runtime::ThrowIfError(runtime::CopyHostToDevice(data, staging.data(), bytes, cuda_device, stream));
  };
  WithRankComm(cuda_device, call, reduce);
}

void TaskContext::ReduceAcrossSlots(std::vector<DeviceBuffer>& buffers, int element_code, ReduceOp op) {
  runtime::LeaseRun* lease = state_->lease;
  const std::string who = "task '" + task_name() + "': AllReduceAcrossSlots";
  if (lease == nullptr || lease->memory.empty()) throw Error(ErrorCode::kFailedPrecondition, who + " needs a GPU lease");
  if (buffers.size() != lease->memory.size()) {
    throw Error(ErrorCode::kInvalidArgument, who + " of " + std::to_string(buffers.size()) + " buffers on a lease of " +
                                                 std::to_string(lease->memory.size()) + " slots (one buffer per slot)");
  }
  const auto type = static_cast<runtime::ElementType>(element_code);
  const uint64_t bytes = buffers.front().size();
  const size_t count = bytes / runtime::ElementSize(type);
  bool nccl = true;
  std::set<std::string> gpus;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const runtime::SlotMemory& m = lease->memory[i];
    if (buffers[i].empty() || buffers[i].size() != bytes) {
      throw Error(ErrorCode::kInvalidArgument, who + ": buffer " + std::to_string(i) + " holds " +
                                                   std::to_string(buffers[i].size()) + " bytes, buffer 0 " +
                                                   std::to_string(bytes) + " (all one size)");
    }
    if (m.pool == nullptr || buffers[i].block_->pool != m.pool) {
      throw Error(ErrorCode::kInvalidArgument, who + ": buffer " + std::to_string(i) + " is not on slot " +
                                                   std::to_string(i) + "'s GPU (use Allocate(bytes, " +
                                                   std::to_string(i) + "))");
    }
    const SlotInfo& slot = lease->slots[i];
    if (m.pool->cuda_device() < 0 || !WholeGpu(slot) ||
        !gpus.insert(slot.node + "/" + std::to_string(slot.gpu_index)).second) {
      nccl = false;
    }
  }
  if (count == 0 || buffers.size() == 1) return;  // one slot: the buffer already holds the result
  if (nccl) {
    if (lease->slots_comm == nullptr || lease->slots_comm->broken()) {
      std::vector<int> devices;
      for (const runtime::SlotMemory& m : lease->memory) devices.push_back(m.pool->cuda_device());
      absl::StatusOr<std::unique_ptr<runtime::NcclCommunicator>> comm = runtime::NcclCommunicator::OverDevices(devices);
      if (!comm.ok()) runtime::ThrowIfError(absl::Status(comm.status().code(), who + ": " + std::string(comm.status().message())));
      lease->slots_comm = *std::move(comm);
    }
    std::vector<runtime::NcclBuffer> on;
    for (size_t i = 0; i < buffers.size(); ++i) on.push_back({buffers[i].data(), StreamOf(buffers[i])});
    absl::Status s = lease->slots_comm->AllReduce(on, count, element_code, op, WaitFor(state_));
    if (!s.ok()) runtime::ThrowIfError(absl::Status(s.code(), who + ": " + std::string(s.message())));
    return;
  }
  // Staged: every buffer to host after its stream's kernels, combined in slot order (the same bits
  // on every slot), copied back.
  const uint64_t used = count * runtime::ElementSize(type);
  runtime::PinnedHostBuffer sum(used), part(used);
  runtime::ThrowIfError(runtime::CopyDeviceToHost(sum.data(), buffers[0].data(), used, buffers[0].cuda_device(),
                                                  StreamOf(buffers[0])));
  for (size_t i = 1; i < buffers.size(); ++i) {
    runtime::ThrowIfError(runtime::CopyDeviceToHost(part.data(), buffers[i].data(), used, buffers[i].cuda_device(),
                                                    StreamOf(buffers[i])));
    runtime::CombineElements(sum.data(), part.data(), count, type, op);
  }
  for (DeviceBuffer& b : buffers) {
    runtime::ThrowIfError(runtime::CopyHostToDevice(b.data(), sum.data(), used, b.cuda_device(), StreamOf(b)));
  }
}

void TaskContext::Broadcast(int root, void* data, size_t bytes) {
  if (data == nullptr && bytes > 0) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Broadcast of no memory");
  runtime::ThrowIfError(state_->runtime->group().Broadcast(root, data, bytes));
}

void TaskContext::Broadcast(int root, DeviceBuffer& buffer) {
  runtime::DeviceCall call{.count = static_cast<int64_t>(buffer.size()), .element_code = -1, .root = root};
  if (buffer.empty()) {
    call.invalid = "task '" + task_name() + "': Broadcast of an empty DeviceBuffer";
  } else if (root < 0 || root >= ranks()) {
    call.invalid = "task '" + task_name() + "': Broadcast from rank " + std::to_string(root) + " of " + std::to_string(ranks());
  }
  void* stream = buffer.empty() ? nullptr : StreamOf(buffer);
  auto broadcast = [&](runtime::NcclCommunicator* comm) {
    if (comm != nullptr) {
      runtime::ThrowIfError(comm->Broadcast({runtime::NcclBuffer{buffer.data(), stream}}, buffer.size(), root, WaitFor(state_)));
      return;
    }
    if (buffer.cuda_device() < 0) return Broadcast(root, buffer.data(), buffer.size());
    runtime::PinnedHostBuffer staging(buffer.size());
    runtime::ThrowIfError(runtime::CopyDeviceToHost(staging.data(), buffer.data(), buffer.size(), buffer.cuda_device(), stream));
    Broadcast(root, staging.data(), buffer.size());
    runtime::ThrowIfError(runtime::CopyHostToDevice(buffer.data(), staging.data(), buffer.size(), buffer.cuda_device(), stream));
  };
  WithRankComm(buffer.cuda_device(), call, broadcast);
}

// Device buffers point to point are staged through host memory: NCCL's send blocks until the peer
// receives and has no tags, which would break the documented semantics (every rank may send
// before it receives; messages match by tag).
void TaskContext::Send(int dst, uint64_t tag, const DeviceBuffer& buffer) {
  if (buffer.empty()) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Send of an empty DeviceBuffer");
  if (buffer.cuda_device() < 0) return Send(dst, tag, buffer.data(), buffer.size());
  runtime::PinnedHostBuffer staging(buffer.size());
  runtime::ThrowIfError(runtime::CopyDeviceToHost(staging.data(), buffer.data(), buffer.size(), buffer.cuda_device(),
                                                  StreamOf(buffer)));
  Send(dst, tag, staging.data(), buffer.size());
}

void TaskContext::Recv(int src, uint64_t tag, DeviceBuffer& buffer) {
  if (buffer.empty()) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Recv into an empty DeviceBuffer");
  auto exactly = [&](void* into) {
    if (Recv(src, tag, into, buffer.size()) != buffer.size()) {
      throw Error(ErrorCode::kDataLoss, "task '" + task_name() + "': Recv into a DeviceBuffer of " +
                                            std::to_string(buffer.size()) + " bytes got fewer bytes than it holds");
    }
  };
  if (buffer.cuda_device() < 0) return exactly(buffer.data());
  runtime::PinnedHostBuffer staging(buffer.size());
  exactly(staging.data());
  runtime::ThrowIfError(runtime::CopyHostToDevice(buffer.data(), staging.data(), buffer.size(), buffer.cuda_device(),
                                                  StreamOf(buffer)));
}

void TaskContext::Send(int dst, uint64_t tag, const void* data, size_t bytes) {
  if (data == nullptr && bytes > 0) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Send of no memory");
  runtime::ThrowIfError(state_->runtime->group().Send(dst, tag, data, bytes));
}

size_t TaskContext::Recv(int src, uint64_t tag, void* data, size_t capacity) {
  if (data == nullptr && capacity > 0) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Recv into no memory");
  return runtime::ValueOrThrow(state_->runtime->group().Recv(src, tag, data, capacity));
}

// A value's bytes travel as two messages with the tag: their size, then themselves.
void TaskContext::SendBytes(int dst, uint64_t tag, const std::string& bytes) {
  uint64_t size = bytes.size();
  Send(dst, tag, &size, sizeof size);
  Send(dst, tag, bytes.data(), bytes.size());
}

std::string TaskContext::RecvBytes(int src, uint64_t tag) {
  uint64_t size = 0;
  if (Recv(src, tag, &size, sizeof size) != sizeof size) {
    throw Error(ErrorCode::kDataLoss, "task '" + task_name() + "': RecvValue got a malformed size from rank " +
                                          std::to_string(src) + " (was it sent with SendValue?)");
  }
  std::string bytes(size, '\0');
  if (Recv(src, tag, bytes.data(), bytes.size()) != size) {
    throw Error(ErrorCode::kDataLoss, "task '" + task_name() + "': RecvValue got fewer bytes than announced");
  }
  return bytes;
}

void TaskContext::BroadcastBytes(int root, std::string& bytes) {
  uint64_t size = bytes.size();
  Broadcast(root, &size, sizeof size);
  bytes.resize(size);
  Broadcast(root, bytes.data(), bytes.size());
}

TaskContext::RefsLeaving::RefsLeaving(TaskContext& ctx, int to) {
  if (to == kNobody) return;
  runtime::JobRuntime& rt = *ctx.state_->runtime;
  std::vector<int> receivers;
  if (to == kEveryOtherRank) {
    for (int r = 0; r < rt.group().size(); ++r) receivers.push_back(r);  // the scope skips this rank
  } else {
    receivers.push_back(to);
  }
  scope_ = new runtime::ObjectExchange::SendScope(rt.exchange(), std::move(receivers));
}

TaskContext::RefsLeaving::~RefsLeaving() { delete static_cast<runtime::ObjectExchange::SendScope*>(scope_); }

void TaskContext::RefsLeaving::Leaving() {
  if (scope_ != nullptr) static_cast<runtime::ObjectExchange::SendScope*>(scope_)->Leaving();
}

}  // namespace gpupool
