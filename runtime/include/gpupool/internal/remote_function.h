// File: gpupool/internal/remote_function.h
//
// NOT SUPPORTED API. Installed because GPUPOOL_REMOTE and Submit expand to it; it may change in
// any release without notice. Include gpupool/remote.h instead.
//
// The function registry (name -> invoker) and the two halves of a call: encoding a submitter's
// arguments (values inline, ObjectRefs as dependencies) and, where the task runs, decoding them
// and calling the function with its TaskContext.
#ifndef GPUPOOL_INTERNAL_REMOTE_FUNCTION_H_
#define GPUPOOL_INTERNAL_REMOTE_FUNCTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpupool/codec.h"
#include "gpupool/error.h"
#include "gpupool/export.h"
#include "gpupool/internal/object_header.h"
#include "gpupool/object_ref.h"
#include "gpupool/task_context.h"

namespace gpupool::detail {

// What the runtime hands a function's invoker: the encoded arguments, the objects they depend on
// (ready by now), the context; the invoker leaves the result in `result`.
struct TaskCall {
  std::string_view args;
  ObjectHeader* const* deps = nullptr;
  size_t dep_count = 0;
  TaskContext* context = nullptr;
  std::unique_ptr<ValueBox> result;
};
using Invoker = void (*)(TaskCall&);

// Turns a result's bytes back into a value of the function's result type (a task run by a worker
// process sends its result home encoded).
using ResultDecoder = std::unique_ptr<ValueBox> (*)(Reader& r);

struct FunctionInfo {
  std::string name;
  const void* address = nullptr;
  Invoker invoke = nullptr;
  ResultDecoder decode_result = nullptr;
};

// Registers once per process (static initialisation); returns the registry's entry. A second
// registration of the same name with another address throws at start-up.
GPUPOOL_API const FunctionInfo* RegisterFunction(const char* name, const void* address,
                                                 Invoker invoke, ResultDecoder decode_result);
// The registered entry for a function address; throws kNotFound when it was never registered.
GPUPOOL_API const FunctionInfo* FunctionFor(const void* address);

template <typename F>
struct FunctionTraits;
template <typename R, typename... P>
struct FunctionTraits<R (*)(P...)> {
  using Result = R;
  using Params = std::tuple<P...>;
  static constexpr bool kTakesContext =
      sizeof...(P) > 0 && std::is_same_v<std::tuple_element_t<0, std::tuple<P..., void>>, TaskContext&>;
  static constexpr size_t kFirstArg = kTakesContext ? 1 : 0;
  static constexpr size_t kArgCount = sizeof...(P) - kFirstArg;
};
template <typename R, typename... P>
struct FunctionTraits<R (*)(P...) noexcept> : FunctionTraits<R (*)(P...)> {};

template <typename R>
using StoredResult = std::conditional_t<std::is_void_v<R>, Nothing, R>;

// Argument encoding: tag 0 = value inline, tag 1 = the k-th dependency's value.
inline constexpr uint64_t kInlineArg = 0;
inline constexpr uint64_t kDependencyArg = 1;

struct EncodedArgs {
  std::string bytes;
  std::vector<ObjectHeader*> deps;    // retained; positional dependencies
  std::vector<ObjectHeader*> nested;  // retained; kept alive only
};
// Lets go of the refs `args` holds (arguments that will not become a task), and forgets them.
inline void ReleaseRefs(EncodedArgs& args) {
  for (ObjectHeader* h : args.deps) Release(h);
  for (ObjectHeader* h : args.nested) Release(h);
  args.deps.clear();
  args.nested.clear();
}

template <typename Param, typename Arg>
void EncodeArg(Writer& w, EncodedArgs& out, Arg&& arg) {
  using P = std::remove_cvref_t<Param>;
  using A = std::remove_cvref_t<Arg>;
  static_assert(!std::is_lvalue_reference_v<Param> || std::is_const_v<std::remove_reference_t<Param>>,
                "gpupool: remote function parameters must be values or const references");
  if constexpr (kIsObjectRef<A> && !kIsObjectRef<P>) {
    static_assert(std::is_same_v<typename A::value_type, P>,
                  "gpupool: an ObjectRef<T> argument must match a parameter of type T");
    if (arg.empty()) throw Error(ErrorCode::kInvalidArgument, "an empty ObjectRef was passed as an argument");
    w.Varint(kDependencyArg);
    w.Varint(out.deps.size());
    ObjectHeader* h = ObjectRefAccess::Header(arg);
    Retain(h);
    out.deps.push_back(h);
  } else {
    static_assert(std::is_constructible_v<P, Arg&&>,
                  "gpupool: argument type does not match the remote function's parameter");
    w.Varint(kInlineArg);
    if constexpr (std::is_same_v<A, P>) {
      Codec<P>::Encode(w, arg);
    } else {
      Codec<P>::Encode(w, P(std::forward<Arg>(arg)));
    }
  }
}

template <typename F, typename... Args, size_t... I>
EncodedArgs EncodeArgsImpl(std::index_sequence<I...>, Args&&... args) {
  using Traits = FunctionTraits<F>;
  static_assert(sizeof...(Args) == Traits::kArgCount,
                "gpupool: wrong number of arguments for this remote function");
  EncodedArgs out;
  std::vector<ObjectHeader*>* previous = nested_refs_sink;
  nested_refs_sink = &out.nested;
  try {
    Writer w(out.bytes);
    (EncodeArg<std::tuple_element_t<Traits::kFirstArg + I, typename Traits::Params>>(
         w, out, std::forward<Args>(args)),
     ...);
  } catch (...) {
    nested_refs_sink = previous;
    for (ObjectHeader* h : out.deps) Release(h);
    for (ObjectHeader* h : out.nested) Release(h);
    throw;
  }
  nested_refs_sink = previous;
  return out;
}

template <typename F, typename... Args>
EncodedArgs EncodeArgs(Args&&... args) {
  return EncodeArgsImpl<F>(std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
}

// One decoded argument: owned when it came inline, borrowed from the store when it was a
// dependency (so a `const T&` parameter reads the stored object without a copy).
template <typename P>
struct ArgSlot {
  std::optional<P> owned;
  const P* borrowed = nullptr;

  ArgSlot(Reader& r, const TaskCall& call) {
    uint64_t tag = r.Varint("an argument tag");
    if (tag == kInlineArg) {
      owned.emplace(Codec<P>::Decode(r));
    } else if (tag == kDependencyArg) {
      uint64_t k = r.Varint("a dependency index");
      if (k >= call.dep_count) throw Error(ErrorCode::kDataLoss, "dependency index out of range");
      ObjectHeader* h = call.deps[k];
      const ValueBox& box = AwaitValue(h, std::chrono::steady_clock::time_point::max());
      if (const std::string* encoded = EncodedBytesOf(box)) {  // sent to this process as bytes
        Reader bytes(*encoded);
        owned.emplace(Codec<P>::Decode(bytes));
      } else {
        borrowed = &ValueAs<P>(h->id, box);
      }
    } else {
      throw Error(ErrorCode::kDataLoss, "unknown argument tag " + std::to_string(tag));
    }
  }
  template <typename Param>
  decltype(auto) Pass() {
    if constexpr (std::is_reference_v<Param>) {
      return static_cast<const P&>(owned ? *owned : *borrowed);
    } else if (owned) {
      return P(std::move(*owned));
    } else {
      return P(*borrowed);
    }
  }
};

template <auto Fn, size_t... I>
void InvokeImpl(TaskCall& call, std::index_sequence<I...>) {
  using Traits = FunctionTraits<decltype(Fn)>;
  using Params = typename Traits::Params;
  using R = typename Traits::Result;
  Reader r(call.args);
  // Braced initialisation evaluates left to right: arguments decode in order.
  std::tuple<ArgSlot<std::remove_cvref_t<std::tuple_element_t<Traits::kFirstArg + I, Params>>>...>
      slots{ArgSlot<std::remove_cvref_t<std::tuple_element_t<Traits::kFirstArg + I, Params>>>(r, call)...};
  auto invoke = [&]() -> decltype(auto) {
    if constexpr (Traits::kTakesContext) {
      return Fn(*call.context,
                std::get<I>(slots).template Pass<std::tuple_element_t<Traits::kFirstArg + I, Params>>()...);
    } else {
      return Fn(std::get<I>(slots).template Pass<std::tuple_element_t<Traits::kFirstArg + I, Params>>()...);
    }
  };
  if constexpr (std::is_void_v<R>) {
    invoke();
    call.result = std::make_unique<TypedBox<Nothing>>();
  } else {
    call.result = std::make_unique<TypedBox<R>>(invoke());
  }
}

template <auto Fn>
void Invoke(TaskCall& call) {
  using Traits = FunctionTraits<decltype(Fn)>;
  InvokeImpl<Fn>(call, std::make_index_sequence<Traits::kArgCount>{});
}

template <auto Fn>
std::unique_ptr<ValueBox> DecodeResult(Reader& r) {
  return DecodeBox<StoredResult<typename FunctionTraits<decltype(Fn)>::Result>>(r);
}

}  // namespace gpupool::detail

#endif  // GPUPOOL_INTERNAL_REMOTE_FUNCTION_H_
