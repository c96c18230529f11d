// File: gpupool/internal/object_header.h
//
// NOT SUPPORTED API. Installed because the public templates (ObjectRef, View, Get, Put, the codec
// of refs) expand to calls into it; it may change in any release without notice. Include
// gpupool/object_ref.h instead.
//
// The part of an object-store entry that ObjectRef touches inline (its reference count, its state,
// its id), the type-erased box a stored value lives in, and the library calls the templates make:
// freeing, awaiting, looking up, and exporting/importing objects that cross ranks. The rest of the
// store is runtime/objects/object_store.h.
#ifndef GPUPOOL_INTERNAL_OBJECT_HEADER_H_
#define GPUPOOL_INTERNAL_OBJECT_HEADER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "gpupool/export.h"

namespace gpupool {

using ObjectId = uint64_t;
template <typename T>
class ObjectRef;

namespace detail {

// A stored value of some type. The store keeps values typed, so a Get in the owning process is a
// pointer hand-off; `EncodeTo` turns one into bytes when it must leave the process.
class ValueBox {
 public:
  virtual ~ValueBox() = default;
  virtual const std::type_info& type() const = 0;
  virtual void EncodeTo(std::string& out) const = 0;
};

template <typename T>
class TypedBox final : public ValueBox {
 public:
  template <typename... A>
  explicit TypedBox(A&&... a) : value(std::forward<A>(a)...) {}
  const std::type_info& type() const override { return typeid(T); }
  void EncodeTo(std::string& out) const override {
    if constexpr (requires(Writer& w, const T& v) { Codec<T>::Encode(w, v); }) {
      Writer w(out);
      Codec<T>::Encode(w, value);
    } else {
      throw Error(ErrorCode::kUnimplemented, "this object's type has no gpupool::Codec");
    }
  }
  T value;
};

// A value that came from another process of the job as its encoded bytes (a task's input sent to
// a worker, an object a worker sent with a task it submitted), still untyped: the typed reader
// (remote_function.h's ArgSlot, ObjectRef::GetView, Python's ValueOf) decodes it with its type's
// codec. Encoding it again gives back the same bytes.
class EncodedValue final : public ValueBox {
 public:
  explicit EncodedValue(std::string b) : bytes(std::move(b)) {}
  const std::type_info& type() const override { return typeid(EncodedValue); }
  void EncodeTo(std::string& out) const override { out.append(bytes); }
  std::string bytes;
};
// The bytes of a value stored encoded (EncodedValue), or null for a typed one.
inline const std::string* EncodedBytesOf(const ValueBox& box) {
  return box.type() == typeid(EncodedValue) ? &static_cast<const EncodedValue&>(box).bytes : nullptr;
}

// The part of an object-store entry that public templates touch inline. The rest lives in the
// library. `refs` counts ObjectRefs, Views and tasks holding the entry.
struct ObjectHeader {
  std::atomic<int64_t> refs{1};
  std::atomic<uint32_t> state{0};  // ObjectState
  ObjectId id = 0;
};
enum ObjectState : uint32_t { kObjectPending = 0, kObjectReady = 1, kObjectFailed = 2 };

GPUPOOL_API void FreeObject(ObjectHeader* object);  // the last reference went away
inline void Retain(ObjectHeader* h) {
  if (h != nullptr) h->refs.fetch_add(1, std::memory_order_relaxed);
}
inline void Release(ObjectHeader* h) {
  if (h != nullptr && h->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) FreeObject(h);
}

// Waits until the object is ready or failed, or the deadline passes. Returns the value, or throws
// the failure (a TaskError for a task that threw) or kDeadlineExceeded.
GPUPOOL_API const ValueBox& AwaitValue(ObjectHeader* object,
                                       std::chrono::steady_clock::time_point deadline);
// Finds a live object by id and retains it; throws kNotFound when it was freed or never existed.
GPUPOOL_API ObjectHeader* LookupObject(ObjectId id);
// Throws kInvalidArgument naming both types when a stored value is read as the wrong type.
[[noreturn]] GPUPOOL_API void ThrowTypeMismatch(ObjectId id, const std::type_info& stored,
                                                const std::type_info& wanted);

// Objects of other ranks of an mpirun job (runtime/objects/object_exchange.h). A ref encoded outside
// a task's arguments is leaving the process: its object is exported (pinned and served to the
// job's other ranks). Decoding a ref finds the local object, or imports another rank's: its bytes
// are fetched and turned back into a value by `decode`.
using BoxDecoder = std::unique_ptr<ValueBox> (*)(Reader& r);
// In a worker process (tasks anywhere): the driver's object `id` in this process's store, retained
// for the caller; its value is fetched from the driver when something here needs it, and `decode`
// reads its bytes (a Get of it fails, naming the object, when the driver no longer has it). Throws
// kFailedPrecondition outside a worker; once the worker stops, the entry comes back failed
// (kCancelled), or this throws kCancelled when the worker's host is gone already.
GPUPOOL_API ObjectHeader* ImportFromDriver(ObjectId id, BoxDecoder decode);
template <typename T>
std::unique_ptr<ValueBox> DecodeBox(Reader& r) {
  if constexpr (requires(Reader& in) { Codec<T>::Decode(in); }) {
    return std::make_unique<TypedBox<T>>(Codec<T>::Decode(r));
  } else {
    throw Error(ErrorCode::kUnimplemented, "this object's type has no gpupool::Codec: it cannot cross ranks");
  }
}
// Fills `lineage` with how to make the object again when it has that (runtime/objects/lineage.h).
// In a worker, a ref in a task's result goes to its driver: one of the driver's own objects needs
// nothing; the worker keeps one it made for the driver, which fetches it when it needs it.
GPUPOOL_API void ExportObject(ObjectHeader* object, std::string* lineage);
// Retained; throws kNotFound for a local id whose object was freed (or never existed).
GPUPOOL_API ObjectHeader* ImportObject(ObjectId id, BoxDecoder decode, std::string lineage);

template <typename T>
const T& ValueAs(ObjectId id, const ValueBox& box) {
  if (box.type() != typeid(T)) ThrowTypeMismatch(id, box.type(), typeid(T));
  return static_cast<const TypedBox<T>&>(box).value;
}

// While a task's arguments are encoded, refs nested inside them are collected here so the task
// keeps them alive until it has run (the submitter may drop its own copies at once).
inline thread_local std::vector<ObjectHeader*>* nested_refs_sink = nullptr;
inline void NoteNestedRef(ObjectHeader* object) {
  if (object != nullptr && nested_refs_sink != nullptr) {
    Retain(object);
    nested_refs_sink->push_back(object);
  }
}

// The library's way between an ObjectRef and its header (ObjectRef's friend): adopting a header
// the caller already retained, and reading a ref's header without retaining it.
struct ObjectRefAccess {
  template <typename T>
  static ObjectRef<T> Adopt(ObjectHeader* h) {
    ObjectRef<T> r;
    r.h_ = h;
    return r;
  }
  template <typename T>
  static ObjectHeader* Header(const ObjectRef<T>& r) {
    return r.h_;
  }
};

}  // namespace detail
}  // namespace gpupool

#endif  // GPUPOOL_INTERNAL_OBJECT_HEADER_H_
