// File: gpupool/internal/reduce_element.h
//
// NOT SUPPORTED API. Installed because TaskContext::AllReduce's templates expand to it; it may
// change in any release without notice. Include gpupool/task_context.h instead.
//
// The element types AllReduce takes, as the codes the library's reduction (runtime/group/
// job_group.h) switches on. Any other type fails to compile with a message naming the four.
#ifndef GPUPOOL_INTERNAL_REDUCE_ELEMENT_H_
#define GPUPOOL_INTERNAL_REDUCE_ELEMENT_H_

#include <cstdint>

namespace gpupool::detail {

template <typename T>
struct ElementCode {
  static_assert(sizeof(T) == 0, "gpupool: AllReduce takes float, double, int32_t or int64_t");
};
template <> struct ElementCode<float> { static constexpr int value = 0; };
template <> struct ElementCode<double> { static constexpr int value = 1; };
template <> struct ElementCode<int32_t> { static constexpr int value = 2; };
template <> struct ElementCode<int64_t> { static constexpr int value = 3; };

}  // namespace gpupool::detail

#endif  // GPUPOOL_INTERNAL_REDUCE_ELEMENT_H_
