#include "runtime/objects/object_store.h"

#include <utility>

namespace gpupool::runtime {

ObjectEntry* ObjectStore::Register(ObjectEntry* entry, ObjectId id) {
  entry->store = this;
  entry->id = id != 0 ? id : next_id_.fetch_add(1, std::memory_order_relaxed);
  live_.fetch_add(1, std::memory_order_relaxed);
  holds_.fetch_add(1, std::memory_order_relaxed);
  Shard& shard = shards_[entry->id % kShards];
  MutexLock lock(&shard.mu);
  // An id given from outside may still name an entry being freed (its count reached zero): the
  // new entry takes the id over, and Free leaves it in place.
  shard.entries.insert_or_assign(entry->id, entry);
  return entry;
}

ObjectEntry* ObjectStore::CreatePending() { return Register(new ObjectEntry()); }

ObjectEntry* ObjectStore::CreatePendingWithId(ObjectId id) { return Register(new ObjectEntry(), id); }

ObjectEntry* ObjectStore::CreateReady(std::unique_ptr<detail::ValueBox> value) { return CreateReadyWithId(0, std::move(value)); }

ObjectEntry* ObjectStore::CreateReadyWithId(ObjectId id, std::unique_ptr<detail::ValueBox> value) {
  ObjectEntry* entry = new ObjectEntry();
  entry->value = std::move(value);
  entry->state.store(detail::kObjectReady, std::memory_order_release);
  return Register(entry, id);
}

std::vector<Task*> ObjectStore::Resolve(ObjectEntry* entry, uint32_t state,
                                        std::unique_ptr<detail::ValueBox> value,
                                        std::exception_ptr failure) {
  std::vector<Task*> dependents;
  {
    MutexLock lock(&entry->mu);
    if (entry->state.load(std::memory_order_relaxed) != detail::kObjectPending) return {};
    entry->value = std::move(value);
    entry->failure = std::move(failure);
    entry->producer = nullptr;
    entry->remaking.store(false, std::memory_order_release);
    // seq_cst pairs with the waiter's increment of waiters_ (see Await): either the waiter sees
    // this state, or this thread sees the waiter and wakes it.
    entry->state.store(state, std::memory_order_seq_cst);
    dependents.swap(entry->dependents);
    dependents.insert(dependents.end(), entry->made_waiters.begin(), entry->made_waiters.end());
    entry->made_waiters.clear();
  }
  WakeWaiters();
  return dependents;
}

std::vector<Task*> ObjectStore::Complete(ObjectEntry* entry, std::unique_ptr<detail::ValueBox> value) {
  return Resolve(entry, detail::kObjectReady, std::move(value), nullptr);
}

std::vector<Task*> ObjectStore::Fail(ObjectEntry* entry, std::exception_ptr failure) {
  return Resolve(entry, detail::kObjectFailed, nullptr, std::move(failure));
}

bool ObjectStore::AddDependent(ObjectEntry* entry, Task* task, bool need_value) {
  {
    MutexLock lock(&entry->mu);
    if (entry->state.load(std::memory_order_relaxed) != detail::kObjectPending) return false;
    if (!need_value) {
      if (entry->remote.load(std::memory_order_relaxed)) return false;  // made, kept elsewhere
      entry->made_waiters.push_back(task);
      return true;
    }
    entry->dependents.push_back(task);
  }
  Want(entry);
  return true;
}

void ObjectStore::SetRemoteValues(std::shared_ptr<RemoteValues> source) {
  MutexLock lock(&remote_mu_);
  remote_ = std::move(source);
}

std::shared_ptr<RemoteValues> ObjectStore::Remote() {
  MutexLock lock(&remote_mu_);
  return remote_;
}

bool ObjectStore::MarkRemote(ObjectEntry* entry, bool* wanted, std::vector<Task*>* made) {
  MutexLock lock(&entry->mu);
  if (entry->state.load(std::memory_order_relaxed) != detail::kObjectPending) return false;
  entry->producer = nullptr;
  entry->remaking.store(false, std::memory_order_release);
  // seq_cst with Want's: of a mark and a want racing, at least one sees the other.
  entry->remote.store(true, std::memory_order_seq_cst);
  *wanted = entry->wanted.load(std::memory_order_seq_cst) || !entry->dependents.empty();
  made->swap(entry->made_waiters);
  return true;
}

bool ObjectStore::MarkRemade(ObjectEntry* entry, Task* producer) {
  MutexLock lock(&entry->mu);
  if (entry->state.load(std::memory_order_relaxed) != detail::kObjectPending) return false;
  entry->producer = producer;
  entry->remaking.store(true, std::memory_order_release);
  entry->remote.store(false, std::memory_order_seq_cst);
  return true;
}

void ObjectStore::Want(ObjectEntry* entry) {
  if (entry->state.load(std::memory_order_acquire) != detail::kObjectPending) return;
  entry->wanted.store(true, std::memory_order_seq_cst);
  if (!entry->remote.load(std::memory_order_seq_cst)) return;
  if (std::shared_ptr<RemoteValues> source = Remote()) source->Want(entry);
}

void ObjectStore::WakeWaiters() {
  if (waiters_.load(std::memory_order_seq_cst) == 0) return;
  { MutexLock lock(&wait_mu_); }
  wait_cv_.NotifyAll();
}

const detail::ValueBox& ObjectStore::Await(ObjectEntry* entry,
                                           std::chrono::steady_clock::time_point deadline) {
  auto resolved = [entry] {
    return entry->state.load(std::memory_order_acquire) != detail::kObjectPending;
  };
  if (!resolved()) {
    // A short spin catches tasks that finish within microseconds without sleeping.
    for (int i = 0; i < 200 && !resolved(); ++i) __builtin_ia32_pause();
  }
  if (!resolved()) {
    Want(entry);
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    MutexLock lock(&wait_mu_);
    bool ok = deadline == std::chrono::steady_clock::time_point::max()
                  ? (wait_cv_.Wait(&wait_mu_, resolved), true)
                  : wait_cv_.WaitUntil(&wait_mu_, deadline, resolved);
    lock.Unlock();
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    if (!ok) {
      throw Error(ErrorCode::kDeadlineExceeded,
                  "object " + std::to_string(entry->id) + " was not ready before the timeout");
    }
  }
  if (entry->state.load(std::memory_order_acquire) == detail::kObjectFailed) {
    std::rethrow_exception(entry->failure);
  }
  return *entry->value;
}

size_t ObjectStore::WaitMany(detail::ObjectHeader* const* objects, size_t count, size_t num_ready,
                             std::chrono::steady_clock::time_point deadline, bool* ready) {
  if (num_ready > count) num_ready = count;
  auto scan = [&] {
    size_t n = 0;
    for (size_t i = 0; i < count; ++i) {
      ready[i] = objects[i]->state.load(std::memory_order_acquire) != detail::kObjectPending;
      n += ready[i];
    }
    return n;
  };
  if (scan() >= num_ready) return scan();
  // Values kept elsewhere are asked for, as Ray's wait fetches what it waits for.
  for (size_t i = 0; i < count; ++i) {
    if (!ready[i]) Want(static_cast<ObjectEntry*>(objects[i]));
  }
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    MutexLock lock(&wait_mu_);
    wait_cv_.WaitUntil(&wait_mu_, deadline, [&] { return scan() >= num_ready; });
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  return scan();
}

bool ObjectStore::Holds(ObjectId id) {
  Shard& shard = shards_[id % kShards];
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(id);
  return it != shard.entries.end() && it->second->refs.load(std::memory_order_relaxed) > 0;
}

ObjectEntry* ObjectStore::Lookup(ObjectId id) {
  Shard& shard = shards_[id % kShards];
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(id);
  if (it == shard.entries.end()) return nullptr;
  return TryRetain(it->second) ? it->second : nullptr;
}

bool ObjectStore::TryRetain(ObjectEntry* entry) {
  int64_t refs = entry->refs.load(std::memory_order_relaxed);
  while (refs > 0) {
    if (entry->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void ObjectStore::Free(ObjectEntry* entry) {
  if (entry->remote.load(std::memory_order_acquire)) {
    if (std::shared_ptr<RemoteValues> source = Remote()) source->Forget(entry);
  }
  {
    Shard& shard = shards_[entry->id % kShards];
    MutexLock lock(&shard.mu);
    if (auto it = shard.entries.find(entry->id); it != shard.entries.end() && it->second == entry) {
      shard.entries.erase(it);
    }
  }
  delete entry;
  live_.fetch_sub(1, std::memory_order_relaxed);
  Unref();
}

void ObjectStore::Unref() {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void ObjectStore::Orphan(std::unique_ptr<ObjectStore> store) { store.release()->Unref(); }

}  // namespace gpupool::runtime
