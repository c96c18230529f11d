// File: transport/element_reduce.h
//
// Element-wise reduction of host arrays: what each step of a ring allreduce does to a chunk
// (host_communicator.h), and what a gang's staged reduction does across its slots. One definition,
// so every path combines alike.
//
//   transport::ReducerFor<float>(ReduceOp::kSum)(into, from, n);   // into[i] += from[i]
#ifndef GPUPOOL_TRANSPORT_ELEMENT_REDUCE_H_
#define GPUPOOL_TRANSPORT_ELEMENT_REDUCE_H_

#include <algorithm>
#include <cstddef>

namespace gpupool::transport {

enum class ReduceOp { kSum, kMax, kMin };

// Combines `n` elements of T at `from` into those at `into`.
using ElementReducer = void (*)(std::byte* into, const std::byte* from, size_t n);

template <typename T, ReduceOp kOp>
void ReduceElements(std::byte* into, const std::byte* from, size_t n) {
  T* a = reinterpret_cast<T*>(into);
  const T* b = reinterpret_cast<const T*>(from);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kOp == ReduceOp::kSum) a[i] += b[i];
    if constexpr (kOp == ReduceOp::kMax) a[i] = std::max(a[i], b[i]);
    if constexpr (kOp == ReduceOp::kMin) a[i] = std::min(a[i], b[i]);
  }
}

template <typename T>
ElementReducer ReducerFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return &ReduceElements<T, ReduceOp::kMax>;
    case ReduceOp::kMin: return &ReduceElements<T, ReduceOp::kMin>;
    case ReduceOp::kSum: break;
  }
  return &ReduceElements<T, ReduceOp::kSum>;
}

}  // namespace gpupool::transport

#endif  // GPUPOOL_TRANSPORT_ELEMENT_REDUCE_H_
