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

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "gpupool/internal/object_header.h"  // not supported API: what the templates below expand to

namespace gpupool {

// The value of a task whose function returns void: such a task gives an ObjectRef<Nothing>.
struct Nothing {};

// A read-only view of a stored value that keeps it alive. No copy is made, except of a value
// stored as its encoded bytes (an object a worker's task made and sent with a GPU task it
// submitted: see GetView), which the view decodes and owns: keep the view, not a reference into
// it, while the value is used.
template <typename T>
class View {
 public:
  const T& operator*() const { return *value_; }
  const T* operator->() const { return value_; }
  const T& get() const { return *value_; }

  View(const View& o) : object_(o.object_), value_(o.value_), owned_(o.owned_) { detail::Retain(object_); }
  View& operator=(View o) {
    std::swap(object_, o.object_);
    std::swap(value_, o.value_);
    std::swap(owned_, o.owned_);
    return *this;
  }
  ~View() { detail::Release(object_); }

 private:
  template <typename U>
  friend class ObjectRef;
  View(detail::ObjectHeader* object, const T* value, std::shared_ptr<const T> owned = nullptr)
      : object_(object), value_(value), owned_(std::move(owned)) {
    detail::Retain(object_);
  }
  detail::ObjectHeader* object_;
  const T* value_;
  std::shared_ptr<const T> owned_;  // the decoded value, for one stored as bytes
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
    const detail::ValueBox& box = detail::AwaitValue(h_, deadline);
    if constexpr (requires(Reader& in) { Codec<T>::Decode(in); }) {
      // Kept as its encoded bytes (an object a worker made, passed on to a task it submitted).
      if (const std::string* encoded = detail::EncodedBytesOf(box)) {
        Reader bytes(*encoded);
        auto owned = std::make_shared<const T>(Codec<T>::Decode(bytes));
        const T* value = owned.get();
        return View<T>(h_, value, std::move(owned));
      }
    }
    const T& v = detail::ValueAs<T>(h_->id, box);
    return View<T>(h_, &v);
  }

 private:
  friend struct detail::ObjectRefAccess;  // the library and its templates: adopt, read the header
  detail::ObjectHeader* h_ = nullptr;
};

// Refs travel as ids. Nested in a task's arguments they stay in the process (the task keeps
// them alive); encoded anywhere else they leave it (TaskContext::SendValue to another rank), and
// their object is exported. Decoding finds the local object or imports the owner rank's.
template <typename T>
struct Codec<ObjectRef<T>> {
  static void Encode(Writer& w, const ObjectRef<T>& r) {
    detail::ObjectHeader* h = detail::ObjectRefAccess::Header(r);
    std::string lineage;  // travels with a ref that leaves the process, when the object has one
    if (detail::nested_refs_sink != nullptr) {
      detail::NoteNestedRef(h);
    } else if (h != nullptr) {
      detail::ExportObject(h, &lineage);
    }
    w.Varint(r.id());
    Codec<std::string>::Encode(w, lineage);
  }
  static ObjectRef<T> Decode(Reader& r) {
    ObjectId id = r.Varint("an object id");
    std::string lineage = Codec<std::string>::Decode(r);
    if (id == 0) return ObjectRef<T>();
    return detail::ObjectRefAccess::Adopt<T>(
        detail::ImportObject(id, &detail::DecodeBox<T>, std::move(lineage)));
  }
};

// Whether T is an ObjectRef<U>.
template <typename T>
inline constexpr bool kIsObjectRef = false;
template <typename T>
inline constexpr bool kIsObjectRef<ObjectRef<T>> = true;

}  // namespace gpupool

#endif  // GPUPOOL_OBJECT_REF_H_
