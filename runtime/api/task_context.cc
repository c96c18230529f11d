// TaskContext and DeviceBuffer: what a running task reads and allocates, over the job runtime's
// lease bookkeeping and the per-GPU memory pools.
#include <chrono>
#include <thread>

#include "gpupool/task_context.h"
#include "runtime/tasks/status_to_error.h"
#include "runtime/gpu/device_copy.h"
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
  return state_->lease != nullptr && state_->lease->memory != nullptr ? state_->lease->memory->cuda_device() : -1;
}
void* TaskContext::stream() const {
  if (state_->lease == nullptr || state_->lease->memory == nullptr) return nullptr;
  return state_->lease->stream != nullptr ? state_->lease->stream : state_->lease->memory->stream();
}
uint64_t TaskContext::memory_budget_bytes() const {
  return state_->lease != nullptr && state_->lease->budget ? state_->lease->budget->limit_bytes : 0;
}
uint64_t TaskContext::memory_used_bytes() const {
  return state_->lease != nullptr && state_->lease->budget ? state_->lease->budget->used_bytes.load() : 0;
}

DeviceBuffer TaskContext::Allocate(uint64_t bytes) {
  runtime::LeaseRun* lease = state_->lease;
  if (lease == nullptr || lease->memory == nullptr) {
    throw Error(ErrorCode::kFailedPrecondition,
                "task '" + task_name() + "' has no GPU: give it Gpus(...) to allocate device memory");
  }
  return DeviceBuffer(runtime::ValueOrThrow(lease->memory->Allocate(lease->budget, bytes)));
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

void TaskContext::Reduce(void* data, size_t count, int element_code, ReduceOp op, int cuda_device) {
  if (count == 0) return;
  if (data == nullptr) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': AllReduce of no memory");
  runtime::JobGroup& group = state_->runtime->group();
  const auto type = static_cast<runtime::ElementType>(element_code);
  if (cuda_device < 0) {
    runtime::ThrowIfError(group.AllReduce(data, count, type, op));
    return;
  }
  // Device memory: staged through pinned host memory, reduced there, copied back.
  const uint64_t bytes = count * runtime::ElementSize(type);
  runtime::PinnedHostBuffer staging(bytes);
  runtime::ThrowIfError(runtime::CopyDeviceToHost(staging.data(), data, bytes, cuda_device));
  runtime::ThrowIfError(group.AllReduce(staging.data(), count, type, op));
  runtime::ThrowIfError(runtime::CopyHostToDevice(data, staging.data(), bytes, cuda_device));
}

void TaskContext::Broadcast(int root, void* data, size_t bytes) {
  if (data == nullptr && bytes > 0) throw Error(ErrorCode::kInvalidArgument, "task '" + task_name() + "': Broadcast of no memory");
  runtime::ThrowIfError(state_->runtime->group().Broadcast(root, data, bytes));
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
