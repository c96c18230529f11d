// File: runtime/objects/object_store.h
//
// The job's object store: every task result and Put value, held typed in host memory (device
// buffers are values too: a DeviceBuffer handle), reference counted, freed when the last ObjectRef,
// View or task holding it goes away. Ids are unique per store; the id table serves lookups of refs
// that travelled as ids.
//
// Lifecycle of an entry: pending (a task will produce it) -> ready | failed. The transition happens
// once, under the entry's mutex, which also guards the list of tasks waiting for it (dependents).
// While pending, a value another process keeps is marked remote (MarkRemote: made, fetched when
// needed), and one lost there and made again here is remaking until it is kept again
// (MarkRemade, ObjectEntry::BeingRemade).
// Waiters block on one store-wide condition variable that is only touched when somebody waits, so
// completing objects nobody waits for costs no system call.
//
// Ownership: the store outlives its entries. Its owner gives it up with Orphan(); the store then
// deletes itself when its last entry is freed (ObjectRefs may outlive the runtime that made them).
//
// Thread-safe.
#ifndef GPUPOOL_RUNTIME_OBJECTS_OBJECT_STORE_H_
#define GPUPOOL_RUNTIME_OBJECTS_OBJECT_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gpupool/object_ref.h"
#include "runtime/sync/mutex.h"

namespace gpupool::runtime {

struct Task;
class ObjectStore;
struct ObjectEntry;

// Values kept elsewhere: another process holds them for this one (a worker holding its driver's
// results and the objects it made: runtime/tasks/remote_objects.h). The store asks for such a
// value when something here needs it (a Get, a wait, a task depending on it: not a task that only
// waits for it to be made, AddDependent's `need_value`) and says when its entry goes away, so the
// holder can let go.
class RemoteValues {
 public:
  virtual ~RemoteValues() = default;
  // Any thread, possibly many times for one entry (the source asks once).
  virtual void Want(ObjectEntry* entry) = 0;
  // The entry's last reference went; it is about to be deleted.
  virtual void Forget(ObjectEntry* entry) = 0;
};

struct ObjectEntry : detail::ObjectHeader {
  ObjectStore* store = nullptr;
  std::atomic<bool> remote{false};          // pending while its value is elsewhere (RemoteValues)
  std::atomic<bool> wanted{false};          // something here waited for it (see MarkRemote)
  // Its value is being made again (MarkRemade; until it is kept elsewhere again or resolved): the
  // copy kept elsewhere was lost. A task that would wait for it holding a lease goes back to wait
  // unleased instead (Executor::AwaitInputs).
  std::atomic<bool> remaking{false};
  bool BeingRemade() const {
    return remaking.load(std::memory_order_acquire) && state.load(std::memory_order_acquire) == detail::kObjectPending;
  }
  // A worker's input that its driver said is being made again (TaskInputs), failed here so: its
  // task goes back to the driver unrun (Executor::AwaitInputs).
  std::atomic<bool> remade_at_driver{false};
  std::unique_ptr<detail::ValueBox> value;  // when ready
  std::exception_ptr failure;               // when failed

  Mutex mu;  // guards the state transition and the fields below
  std::vector<Task*> dependents ABSL_GUARDED_BY(mu);  // tasks waiting for it (each holds a count on it)
  // Tasks waiting only for it to be made, not for its value here (a ref nested in their
  // arguments): a value kept elsewhere satisfies them (MarkRemote).
  std::vector<Task*> made_waiters ABSL_GUARDED_BY(mu);
  Task* producer ABSL_GUARDED_BY(mu) = nullptr;  // the task that will produce it, while pending (for Cancel)
};

class ObjectStore {
 public:
  ObjectStore() = default;
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // A new pending entry with one reference (the caller's).
  ObjectEntry* CreatePending();
  // The same under an id given from outside: an object of another process of the job, whose
  // value will be fetched (its id must not be one this store hands out: see SetIdBase).
  ObjectEntry* CreatePendingWithId(ObjectId id);
  // The ids this store hands out start after `base`. Under mpirun each rank's store takes
  // rank << kRankShift, so ids are unique in the job and name their owner.
  void SetIdBase(ObjectId base) { next_id_.store(base + 1, std::memory_order_relaxed); }
  static constexpr int kRankShift = 48;
  // A new ready entry holding `value`, with one reference.
  ObjectEntry* CreateReady(std::unique_ptr<detail::ValueBox> value);
  // The same under an id given from outside: a worker's copy of its driver's object keeps the
  // driver's id, so a ref to it means the same object in both processes (its id must not be one
  // this store hands out, nor one it holds now).
  ObjectEntry* CreateReadyWithId(ObjectId id, std::unique_ptr<detail::ValueBox> value);

  // Resolves a pending entry; returns the tasks that were waiting for it. A second resolution is
  // ignored (returns nothing): a cancelled task's late result is dropped this way.
  std::vector<Task*> Complete(ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value);
  std::vector<Task*> Fail(ObjectEntry* entry, std::exception_ptr failure);

  // Registers `task` as waiting for `entry` unless it is already resolved; returns whether it
  // registered (false: resolved, look at its state). A value kept elsewhere is asked for. With
  // `need_value` false the task waits only for the value to be made: kept elsewhere is enough
  // (false at once), and nothing is asked for.
  bool AddDependent(ObjectEntry* entry, Task* task, bool need_value = true);

  // Values kept elsewhere. MarkRemote: a pending entry's value is kept by the source set here
  // (once, before the first such entry); the entry has no producer any more (it cannot be
  // cancelled). False when it was resolved meanwhile (a cancelled task's result). `*wanted`:
  // something already waits for its value (the caller asks the source for it: a Want made before
  // the mark found nothing to ask). `*made`: the tasks that waited only for it to be made (the
  // caller resolves them). Want: asks for the value of a pending remote entry (Await, WaitMany
  // and AddDependent do this themselves).
  void SetRemoteValues(std::shared_ptr<RemoteValues> source) ABSL_LOCKS_EXCLUDED(remote_mu_);
  bool MarkRemote(ObjectEntry* entry, bool* wanted, std::vector<Task*>* made);
  // The reverse, for a value lost where it was kept and made again here by `producer` (its task
  // run again): pending as a task's result once more (and `remaking` until the next MarkRemote),
  // so tasks wait for it to be made and Cancel reaches its producer. A Want meanwhile is
  // remembered for the next MarkRemote. False when it was resolved meanwhile.
  bool MarkRemade(ObjectEntry* entry, Task* producer);
  void Want(ObjectEntry* entry) ABSL_LOCKS_EXCLUDED(remote_mu_);

  const detail::ValueBox& Await(ObjectEntry* entry, std::chrono::steady_clock::time_point deadline);
  size_t WaitMany(detail::ObjectHeader* const* objects, size_t count, size_t num_ready,
                  std::chrono::steady_clock::time_point deadline, bool* ready);

  // Retains and returns a live entry; nullptr when unknown or freed.
  ObjectEntry* Lookup(ObjectId id);
  // Retains an entry the caller can reach but does not hold; false when its count already
  // reached zero (it is being freed: it is gone for the caller).
  static bool TryRetain(ObjectEntry* entry);
  // Whether a live entry has this id, without retaining it (the answer may be stale at once).
  bool Holds(ObjectId id);
  // Called when an entry's count reaches zero.
  void Free(ObjectEntry* entry);

  uint64_t live_objects() const { return live_.load(std::memory_order_relaxed); }

  // Gives up ownership: the store deletes itself once its last entry is freed.
  static void Orphan(std::unique_ptr<ObjectStore> store);

 private:
  static constexpr int kShards = 32;
  struct Shard {
    Mutex mu;
    absl::flat_hash_map<ObjectId, ObjectEntry*> entries ABSL_GUARDED_BY(mu);
  };
  ObjectEntry* Register(ObjectEntry* entry, ObjectId id = 0);
  std::vector<Task*> Resolve(ObjectEntry* entry, uint32_t state, std::unique_ptr<detail::ValueBox> value,
                             std::exception_ptr failure);
  void WakeWaiters();
  void Unref();  // one of live entries or the owner's hold went away

  std::atomic<ObjectId> next_id_{1};
  std::atomic<uint64_t> live_{0};
  std::atomic<int64_t> holds_{1};  // live entries + 1 while owned
  Shard shards_[kShards];

  std::shared_ptr<RemoteValues> Remote() ABSL_LOCKS_EXCLUDED(remote_mu_);
  Mutex remote_mu_;
  std::shared_ptr<RemoteValues> remote_ ABSL_GUARDED_BY(remote_mu_);

  std::atomic<int> waiters_{0};
  Mutex wait_mu_;  // guards no field: waiters sleep on wait_cv_ with it, the states are atomic
  CondVar wait_cv_;
};

}  // namespace gpupool::runtime

#endif  // GPUPOOL_RUNTIME_OBJECTS_OBJECT_STORE_H_
