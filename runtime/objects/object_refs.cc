// The public object-ref functions that need only the object's own store (gpupool/object_ref.h and
// runtime.h declare them; their templates call them): freeing, awaiting and waiting for objects, and
// the type check's error. Those that need the process's runtime (lookup, export, import) are in
// runtime/api/runtime.cc. They live here so the layers below the API (the object exchange, the task
// engine) can free and await objects without calling upwards.
#include <chrono>
#include <cstddef>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "gpupool/error.h"
#include "gpupool/object_ref.h"
#include "gpupool/runtime.h"
#include "runtime/objects/object_store.h"

namespace gpupool::detail {

size_t WaitObjects(ObjectHeader* const* objects, size_t count, size_t num_ready,
                   std::chrono::steady_clock::time_point deadline, bool* ready) {
  if (count == 0) return 0;
  return static_cast<runtime::ObjectEntry*>(objects[0])->store->WaitMany(objects, count, num_ready,
                                                                          deadline, ready);
}

void FreeObject(ObjectHeader* object) {
  auto* entry = static_cast<runtime::ObjectEntry*>(object);
  entry->store->Free(entry);
}

const ValueBox& AwaitValue(ObjectHeader* object, std::chrono::steady_clock::time_point deadline) {
  auto* entry = static_cast<runtime::ObjectEntry*>(object);
  return entry->store->Await(entry, deadline);
}

void ThrowTypeMismatch(ObjectId id, const std::type_info& stored, const std::type_info& wanted) {
  throw Error(ErrorCode::kInvalidArgument, absl::StrCat("object ", id, " holds a value of type ",
                                                        stored.name(), ", read as ", wanted.name()));
}

}  // namespace gpupool::detail
