// The process-wide table of remote functions. Registration happens during static initialisation
// (GPUPOOL_REMOTE), before main; lookups happen on every Submit, so they take a reader lock only.
#include <map>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "gpupool/remote.h"
#include "runtime/sync/mutex.h"
#include "runtime/tasks/function_registry.h"

namespace gpupool::detail {
namespace {

struct Registry {
  runtime::SharedMutex mu;
  std::map<std::string, std::unique_ptr<FunctionInfo>, std::less<>> by_name ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<const void*, const FunctionInfo*> by_address ABSL_GUARDED_BY(mu);
};

// Constructed on first use: registrations run from other translation units' static initialisers,
// in an order C++ does not define. Never destroyed, so late lookups during exit stay valid.
Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

}  // namespace

const FunctionInfo* RegisterFunction(const char* name, const void* address, Invoker invoke,
                                     ResultDecoder decode_result) {
  Registry& r = TheRegistry();
  runtime::WriterMutexLock lock(&r.mu);
  auto it = r.by_name.find(name);
  if (it != r.by_name.end()) {
    if (it->second->address != address) {
      throw Error(ErrorCode::kAlreadyExists,
                  std::string("two different functions are registered as '") + name + "'");
    }
    return it->second.get();
  }
  auto info = std::make_unique<FunctionInfo>(FunctionInfo{name, address, invoke, decode_result});
  const FunctionInfo* raw = info.get();
  r.by_name.emplace(name, std::move(info));
  r.by_address[address] = raw;
  return raw;
}

const FunctionInfo* FunctionFor(const void* address) {
  Registry& r = TheRegistry();
  runtime::ReaderMutexLock lock(&r.mu);
  auto it = r.by_address.find(address);
  if (it == r.by_address.end()) {
    throw Error(ErrorCode::kNotFound,
                "this function is not registered as a remote function: add GPUPOOL_REMOTE(name) "
                "at namespace scope in its source file");
  }
  return it->second;
}

const FunctionInfo* FunctionNamed(std::string_view name) {
  Registry& r = TheRegistry();
  runtime::ReaderMutexLock lock(&r.mu);
  auto it = r.by_name.find(name);
  return it == r.by_name.end() ? nullptr : it->second.get();
}

}  // namespace gpupool::detail
