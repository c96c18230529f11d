// File: gpupool/task_context.h
//
// What a running task knows about where it runs. A remote function that takes
// `gpupool::TaskContext&` as its first parameter receives one:
//
//   float Score(gpupool::TaskContext& ctx, int batch) {
//     gpupool::DeviceBuffer scratch = ctx.Allocate(256 << 20);  // from this lease's budget
//     launch_kernel(scratch.data(), ctx.stream(), ...);
//     ctx.Step();   // a safe point: cancellation and checkpoints happen here
//     ...
//   }
//
// Checkpoints (DESIGN §5): a task that registers its state is snapshotted by the runtime at safe
// points, every checkpoint_interval_s of pool time (its priority class's) and when its lease is
// revoked, and resumes from its last committed snapshot when it runs again:
//
//   int Train(gpupool::TaskContext& ctx, int steps) {
//     std::vector<float> weights(1 << 20);
//     int64_t first = ctx.Checkpointable({gpupool::StateRegion::Of(weights)});  // 0, or resumed
//     for (int64_t s = first; s < steps; ++s) {
//       Update(weights, s);
//       ctx.Step();   // counts steps; snapshots when due; on revocation: snapshot, then stop
//     }
//     ...
//
// Memory: each lease has a budget (the fraction's memory, or the whole GPU's). Allocate throws
// gpupool::Error(kResourceExhausted) when the task would exceed it; only that task fails. Memory
// that last belonged to another team is zeroed before it is handed out.
//
// A TaskContext is valid only during the task's call, on the thread that runs it.
#ifndef GPUPOOL_TASK_CONTEXT_H_
#define GPUPOOL_TASK_CONTEXT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gpupool/codec.h"
#include "gpupool/export.h"
#include "gpupool/internal/reduce_element.h"  // not supported API: AllReduce's element codes

namespace gpupool {

namespace detail {
struct TaskState;
}  // namespace detail
namespace runtime {
struct MemoryBlock;
class Executor;
class NcclCommunicator;
struct DeviceCall;
}  // namespace runtime

// One slot of the task's lease.
struct SlotInfo {
  std::string node;
  int gpu_index = 0;         // the GPU's index on its node
  std::string model;         // catalogue name
  int cuda_device = -1;      // CUDA ordinal in this process; -1 on a simulated GPU
  std::string kind;          // "whole" | "mig" | "mps" | "fraction"
  int compute_milli = 1000;  // share of the GPU's compute
  uint64_t memory_budget_bytes = 0;
};

// Device memory allocated from a lease's budget: on a real GPU, stream-ordered device memory; on a
// simulated GPU, host memory with the same accounting. Move-only; freed (and returned to the
// budget) when destroyed. To hand one to another task, Put it and pass the ObjectRef: device
// buffers travel by reference, never by value.
class GPUPOOL_API DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const;
  uint64_t size() const;
  int cuda_device() const;  // -1 when simulated (data() is then host memory)
  bool empty() const { return block_ == nullptr; }

 private:
  friend class TaskContext;  // Allocate makes them
  explicit DeviceBuffer(runtime::MemoryBlock* block) : block_(block) {}

  runtime::MemoryBlock* block_ = nullptr;
};

// A piece of a task's state for checkpoints: host memory, or device memory (staged through host
// memory when it is snapshotted or restored). The memory must stay where it is while the task runs.
struct StateRegion {
  void* data = nullptr;
  uint64_t bytes = 0;
  int cuda_device = -1;  // >= 0: device memory on that CUDA device

  template <typename T>
  static StateRegion Of(std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>, "gpupool: checkpointed vectors hold trivially copyable values");
    return StateRegion{v.data(), v.size() * sizeof(T), -1};
  }
  template <typename T>
  static StateRegion Of(T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "gpupool: checkpointed values are trivially copyable");
    return StateRegion{&value, sizeof(T), -1};
  }
  static StateRegion Of(DeviceBuffer& buffer) {
    return StateRegion{buffer.data(), buffer.size(), buffer.cuda_device()};
  }
};

// How AllReduce combines the ranks' values, element by element.
enum class ReduceOp { kSum, kMax, kMin };

class GPUPOOL_API TaskContext {
 public:
  const std::string& task_name() const;
  uint64_t task_id() const;
  const std::string& team() const;
  int attempt() const;  // 0 on the first run, then 1, 2, ... after system failures

  // The lease's slots; empty for a CPU task.
  const std::vector<SlotInfo>& slots() const;
  // The first slot's CUDA device and a stream of this lease on it (a cudaStream_t; nullptr when
  // simulated or for a CPU task). That device is current on the task's thread while it runs.
  int cuda_device() const;
  void* stream() const;

  uint64_t memory_budget_bytes() const;
  uint64_t memory_used_bytes() const;
  // Allocates on the first slot's GPU; throws kResourceExhausted beyond the budget.
  DeviceBuffer Allocate(uint64_t bytes);
  // Allocates on slot `slot`'s GPU, from that slot's budget (each GPU of a gang lease has its
  // own); kOutOfRange for a slot the lease does not have.
  DeviceBuffer Allocate(uint64_t bytes, size_t slot);

  // Reduces one buffer per slot of this task's lease across the lease's GPUs, element by element,
  // in place: `buffers[i]` lives on slot i's GPU (Allocate(bytes, i)), all of one size, and every
  // one ends up holding the result. A gang lease on several whole GPUs of one node (Gpus(4)):
  //
  //   std::vector<gpupool::DeviceBuffer> grads;
  //   for (size_t i = 0; i < ctx.slots().size(); ++i) grads.push_back(ctx.Allocate(bytes, i));
  //   ... one kernel per GPU writes its gradient ...
  //   ctx.AllReduceAcrossSlots<float>(grads);   // NCCL over the lease's GPUs
  //
  // Where every slot is a distinct whole real GPU this is NCCL: a communicator over the slots'
  // GPUs (ncclCommInitAll) made on first use and kept for the lease, one launch per GPU on the
  // lease's streams. Elsewhere (simulated GPUs, slots sharing a GPU, MIG instances, fractions)
  // the buffers are staged through host memory and reduced there. If the task is cancelled, its
  // lease lost, or a revoked lease's grace period is about to run out while the reduction waits, the
  // communicator is aborted (ncclCommAbort), this throws kAborted, and the next call makes a new
  // one. Kernels that wrote the buffers must have been queued on the slots' lease streams
  // (slot_stream(i)) or completed. One slot: the buffer is already the result.
  template <typename T>  // T: float, double, int32_t, int64_t
  void AllReduceAcrossSlots(std::vector<DeviceBuffer>& buffers, ReduceOp op = ReduceOp::kSum) {
    ReduceAcrossSlots(buffers, detail::ElementCode<T>::value, op);
  }
  // Slot `slot`'s stream of this lease (a cudaStream_t; nullptr when simulated).
  void* slot_stream(size_t slot) const;

  // Cancel() was called on the task's result, the lease was revoked, or the runtime is stopping.
  bool cancelled() const;
  // A safe point; counts one step. Takes a snapshot when one is due (the priority class's
  // checkpoint_interval_s of pool time since the last); when the lease was revoked, snapshots
  // (checkpointable tasks) and stops; when cancelled, stops. Stopping throws gpupool::Error
  // (kCancelled, or kAborted for a preemption, after which the runtime runs the task again).
  void Step();

  // Makes the task checkpointable: `state` is everything its progress depends on. Returns the step
  // to continue from: 0 on a fresh start, or the step of the last committed snapshot, whose bytes
  // are then already in `state`. Call once, before the loop. Throws kFailedPrecondition if the
  // state's size differs from the snapshot's (the task changed), kDataLoss if no snapshot verifies.
  int64_t Checkpointable(std::vector<StateRegion> state);
  // The same with callbacks, for state that is not a few flat buffers: `save` returns the bytes
  // to keep, `load` receives them on resume.
  int64_t Checkpointable(std::function<std::string()> save, std::function<void(std::string_view)> load);
  bool resumed() const;   // Checkpointable restored a snapshot
  int64_t step() const;   // steps counted so far, including those before a resume

  // The pool's clock, in seconds since the runtime started. The demo and simulations run it faster
  // than real time (RuntimeOptions::clock_speed); SleepPoolTime sleeps pool seconds accordingly.
  double pool_time_s() const;
  void SleepPoolTime(double seconds);

  // Collectives over the job's ranks: under mpirun every rank of the job (the ranks' UCX workers
  // are connected at Init); otherwise the job is one rank and they are local. As with MPI or
  // NCCL, every rank makes the same calls in the same order, and one task per rank at a time uses
  // them. Data-parallel training, one task per rank:
  //
  //   std::vector<float> grad = Gradient(shard, weights);
  //   ctx.AllReduce(grad);                       // sum over ranks, in place, same bits everywhere
  //   for (float& g : grad) g /= ctx.ranks();
  //
  // A rank whose task was preempted is not lost: the others wait in their next collective while
  // its task resumes from its snapshot (up to RuntimeOptions::collective_timeout_s). A rank that
  // died makes every later collective throw gpupool::Error(kUnavailable) naming it; one that never
  // arrives, kDeadlineExceeded. Bad arguments throw kInvalidArgument. Host memory is reduced over
  // UCX. DeviceBuffer collectives (AllReduce, Broadcast) go over NCCL when every rank's buffer is
  // on its task's own (first) GPU, a whole real GPU (not a MIG instance or a share), and no two
  // ranks share a GPU: a communicator over the ranks, made at the first such collective (rank 0's
  // id travels over the job's control channel) and kept while no rank's GPU changes and the lease
  // on it lasts; with one rank it is a communicator of one, run for real. Otherwise every rank
  // stages that call through pinned host memory. Before each device collective the ranks agree,
  // in one small host message, on the path and on the call (size, type, root, operation): a
  // mismatch or an invalid argument on any rank throws kInvalidArgument on every rank. A device
  // collective is ordered after the kernels queued on the buffer's lease stream, and has completed
  // when the call returns. A rank whose task is cancelled, whose lease is lost, or whose revoked lease's
  // grace period is about to run out while it waits in one aborts the communicator (kAborted);
  // its peers' collective fails by collective_timeout_s (kDeadlineExceeded, or kUnavailable when
  // NCCL notices the loss first).
  int rank() const;   // this task's rank in the job (its process's)
  int ranks() const;  // the job's ranks
  template <typename T>  // T: float, double, int32_t, int64_t
  void AllReduce(T* data, size_t count, ReduceOp op = ReduceOp::kSum) {
    ReduceHost(data, count, detail::ElementCode<T>::value, op);
  }
  template <typename T>
  void AllReduce(std::vector<T>& data, ReduceOp op = ReduceOp::kSum) {
    AllReduce(data.data(), data.size(), op);
  }
  // The buffer holds elements of T: NCCL or staged through pinned host memory, as said above.
  template <typename T>
  void AllReduce(DeviceBuffer& buffer, ReduceOp op = ReduceOp::kSum) {
    ReduceDevice(buffer, buffer.size() / sizeof(T), detail::ElementCode<T>::value, op);
  }
  // `bytes` at `data` on rank `root` are copied to every rank's `data` (same size everywhere).
  void Broadcast(int root, void* data, size_t bytes);
  void Broadcast(int root, DeviceBuffer& buffer);  // NCCL, or staged through host memory, as AllReduce
  template <typename T>
  void Broadcast(int root, std::vector<T>& data) {
    static_assert(std::is_trivially_copyable_v<T>, "gpupool: broadcast trivially copyable values");
    Broadcast(root, data.data(), data.size() * sizeof(T));
  }
  // Point to point. Send returns once the bytes have left (the receiver holds them until its
  // Recv), so every rank may send before it receives. Messages from one rank with one tag arrive
  // in order; tags are below 2^63. Recv returns the message's size and throws kOutOfRange when it
  // is larger than `capacity`.
  void Send(int dst, uint64_t tag, const void* data, size_t bytes);
  size_t Recv(int src, uint64_t tag, void* data, size_t capacity);
  // A DeviceBuffer to another rank, into a DeviceBuffer of the same size there, with the host
  // messages' semantics above (staged through pinned host memory: NCCL's point to point has no
  // tags and a send waits for its receive, which would change them). Recv throws kDataLoss when
  // the message is smaller than the buffer.
  void Send(int dst, uint64_t tag, const DeviceBuffer& buffer);
  void Recv(int src, uint64_t tag, DeviceBuffer& buffer);

  // Values of any encodable type (gpupool/codec.h), of any size. ObjectRefs inside them cross
  // ranks: the receiver gets a ref to the sender's object, fetched from it over UCX at once
  // (Get waits for the fetch; a task may take it as an argument). The sender keeps such an object
  // until every receiver has fetched it (or is gone), and from then on only as long as its own
  // refs do: sending refs every step does not pile objects up.
  //
  //   // rank 0                                        // every rank
  //   auto table = gpupool::Put(LoadTable());          ctx.BroadcastValue(0, table);
  //                                                    const Table& t = *gpupool::Get(table);
  template <typename T>
  void SendValue(int dst, uint64_t tag, const T& value) {
    RefsLeaving refs(*this, dst);
    std::string bytes;
    Writer w(bytes);
    Codec<T>::Encode(w, value);
    refs.Leaving();
    SendBytes(dst, tag, bytes);
  }
  template <typename T>
  T RecvValue(int src, uint64_t tag) {
    std::string bytes = RecvBytes(src, tag);
    Reader r(bytes);
    return Codec<T>::Decode(r);
  }
  // `value` on `root` is copied to every rank's `value`.
  template <typename T>
  void BroadcastValue(int root, T& value) {
    RefsLeaving refs(*this, rank() == root ? kEveryOtherRank : kNobody);
    std::string bytes;
    if (rank() == root) {
      Writer w(bytes);
      Codec<T>::Encode(w, value);
    }
    refs.Leaving();
    BroadcastBytes(root, bytes);
    if (rank() != root) {
      Reader r(bytes);
      value = Codec<T>::Decode(r);
    }
  }

 private:
  friend class runtime::Executor;  // makes one for each run of a task
  explicit TaskContext(detail::TaskState* state) : state_(state) {}

  // While one lives, refs encoded on this thread leave for `to` (a rank, kEveryOtherRank or
  // kNobody): each receiver sends a receipt once it has fetched them, and this rank keeps their
  // objects until then. Leaving() once encoded, before sending; without it (encoding threw),
  // nothing is kept for them.
  static constexpr int kEveryOtherRank = -1;
  static constexpr int kNobody = -2;
  class GPUPOOL_API RefsLeaving {
   public:
    RefsLeaving(TaskContext& ctx, int to);
    ~RefsLeaving();
    RefsLeaving(const RefsLeaving&) = delete;
    RefsLeaving& operator=(const RefsLeaving&) = delete;
    void Leaving();

   private:
    void* scope_ = nullptr;  // runtime::ObjectExchange::SendScope, or null
  };

  void ReduceHost(void* data, size_t count, int element_code, ReduceOp op);
  void ReduceDevice(DeviceBuffer& buffer, size_t count, int element_code, ReduceOp op);
  void ReduceAcrossSlots(std::vector<DeviceBuffer>& buffers, int element_code, ReduceOp op);
  // The stream the buffer's kernels are queued on (its lease's), which staging copies wait for.
  static void* StreamOf(const DeviceBuffer& buffer);
  // Agrees with the other ranks on this device collective (its arguments and its path), then runs
  // `op` with the ranks' NCCL communicator, or with null when this call stages through host memory.
  // (A function pointer and its context rather than std::function: no allocation per collective.)
  void WithRankComm(int cuda_device, const runtime::DeviceCall& call,
                    void (*op)(void* context, runtime::NcclCommunicator* comm), void* context);
  template <typename Op>
  void WithRankComm(int cuda_device, const runtime::DeviceCall& call, Op& op) {
    WithRankComm(cuda_device, call, [](void* c, runtime::NcclCommunicator* comm) { (*static_cast<Op*>(c))(comm); }, &op);
  }
  void SendBytes(int dst, uint64_t tag, const std::string& bytes);
  std::string RecvBytes(int src, uint64_t tag);
  void BroadcastBytes(int root, std::string& bytes);

  detail::TaskState* state_;
};

}  // namespace gpupool

#endif  // GPUPOOL_TASK_CONTEXT_H_
