// File: gpupool/object_ref.h
//
// ObjectRef<T> names a value in the object store: the future result of a task, or a value given to
// Put. It is a counted reference: the object is freed when the last ObjectRef (and the last View,
// and the last task that takes it as an argument) goes away. Copying one is an atomic increment.
//
//   gpupool::ObjectRef<int> r = gpupool::Submit(Square, 7);
//   gpupool::View<int> v = gpupool::Get(r);   // waits; a read-only view, no copy
//   int x = *v;
//
// An ObjectRef can be passed as a task argument where the task takes T: it is a dependency, and the
// task starts when the object exists. It can also travel inside other arguments (it encodes as its
// id); decoding an id whose object was freed throws kNotFound.
//
// Thread-safe: refs and views may be copied, passed and dropped on any thread.
#ifndef GPUPOOL_OBJECT_REF_H_
#define GPUPOOL_OBJECT_REF_H_

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
template <typename T>
std::unique_ptr<ValueBox> DecodeBox(Reader& r) {
  if constexpr (requires(Reader& in) { Codec<T>::Decode(in); }) {
    return std::make_unique<TypedBox<T>>(Codec<T>::Decode(r));
  } else {
    throw Error(ErrorCode::kUnimplemented, "this object's type has no gpupool::Codec: it cannot cross ranks");
  }
}
// Fills `lineage` with how to make the object again when it has that (runtime/objects/lineage.h).
GPUPOOL_API void ExportObject(ObjectHeader* object, std::string* lineage);
// Retained; throws kNotFound for a local id whose object was freed (or never existed).
GPUPOOL_API ObjectHeader* ImportObject(ObjectId id, BoxDecoder decode, std::string lineage);

template <typename T>
const T& ValueAs(ObjectId id, const ValueBox& box) {
  if (box.type() != typeid(T)) ThrowTypeMismatch(id, box.type(), typeid(T));
  return static_cast<const TypedBox<T>&>(box).value;
}

}  // namespace detail

// A read-only view of a stored value that keeps it alive. No copy is made.
template <typename T>
class View {
 public:
  const T& operator*() const { return *value_; }
  const T* operator->() const { return value_; }
  const T& get() const { return *value_; }

  View(const View& o) : object_(o.object_), value_(o.value_) { detail::Retain(object_); }
  View& operator=(View o) {
    std::swap(object_, o.object_);
    std::swap(value_, o.value_);
    return *this;
  }
  ~View() { detail::Release(object_); }

 private:
  template <typename U>
  friend class ObjectRef;
  View(detail::ObjectHeader* object, const T* value) : object_(object), value_(value) {
    detail::Retain(object_);
  }
  detail::ObjectHeader* object_;
  const T* value_;
};

template <typename T>
class ObjectRef {
 public:
  using value_type = T;
  ObjectRef() = default;  // empty: Get throws kFailedPrecondition
  ObjectRef(const ObjectRef& o) : h_(o.h_) { detail::Retain(h_); }
  ObjectRef(ObjectRef&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  ObjectRef& operator=(ObjectRef o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~ObjectRef() { detail::Release(h_); }

  // The object's id, unique in the job (0 for an empty ref).
  ObjectId id() const { return h_ != nullptr ? h_->id : 0; }
  bool empty() const { return h_ == nullptr; }
  // Whether the value (or its failure) is there, without waiting.
  bool ready() const {
    return h_ != nullptr && h_->state.load(std::memory_order_acquire) != detail::kObjectPending;
  }

  // Waits for the value; throws the task's failure. Prefer gpupool::Get.
  View<T> GetView(std::chrono::steady_clock::time_point deadline =
                      std::chrono::steady_clock::time_point::max()) const {
    if (h_ == nullptr) throw Error(ErrorCode::kFailedPrecondition, "Get on an empty ObjectRef");
    const T& v = detail::ValueAs<T>(h_->id, detail::AwaitValue(h_, deadline));
    return View<T>(h_, &v);
  }

  // Adopts an already-retained header. For the library and its templates.
  static ObjectRef Adopt(detail::ObjectHeader* h) {
    ObjectRef r;
    r.h_ = h;
    return r;
  }
  detail::ObjectHeader* header() const { return h_; }

 private:
  detail::ObjectHeader* h_ = nullptr;
};

namespace detail {
// While a task's arguments are encoded, refs nested inside them are collected here so the task
// keeps them alive until it has run (the submitter may drop its own copies at once).
inline thread_local std::vector<ObjectHeader*>* nested_refs_sink = nullptr;
inline void NoteNestedRef(ObjectHeader* object) {
  if (object != nullptr && nested_refs_sink != nullptr) {
    Retain(object);
    nested_refs_sink->push_back(object);
  }
}
}  // namespace detail

// Refs travel as ids. Nested in a task's arguments they stay in the process (the task keeps
// them alive); encoded anywhere else they leave it (TaskContext::SendValue to another rank), and
// their object is exported. Decoding finds the local object or imports the owner rank's.
template <typename T>
struct Codec<ObjectRef<T>> {
  static void Encode(Writer& w, const ObjectRef<T>& r) {
    std::string lineage;  // travels with a ref that leaves the process, when the object has one
    if (detail::nested_refs_sink != nullptr) {
      detail::NoteNestedRef(r.header());
    } else if (r.header() != nullptr) {
      detail::ExportObject(r.header(), &lineage);
    }
    w.Varint(r.id());
    Codec<std::string>::Encode(w, lineage);
  }
  static ObjectRef<T> Decode(Reader& r) {
    ObjectId id = r.Varint("an object id");
    std::string lineage = Codec<std::string>::Decode(r);
    if (id == 0) return ObjectRef<T>();
    return ObjectRef<T>::Adopt(detail::ImportObject(id, &detail::DecodeBox<T>, std::move(lineage)));
  }
};

template <typename T>
inline constexpr bool kIsObjectRef = false;
template <typename T>
inline constexpr bool kIsObjectRef<ObjectRef<T>> = true;

}  // namespace gpupool

#endif  // GPUPOOL_OBJECT_REF_H_
