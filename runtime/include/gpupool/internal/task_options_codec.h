// File: gpupool/internal/task_options_codec.h
//
// NOT SUPPORTED API; it may change in any release without notice.
//
// TaskOptions as bytes (gpupool/codec.h): every row of GPUPOOL_TASK_OPTIONS, in the list's order,
// each with its type's codec. The runtime encodes options into an object's lineage (which crosses
// the ranks of one job: runtime/objects/lineage.cc) and into the key that decides which tasks
// share leases (runtime/tasks/task_shapes.cc), so a new option reaches both without being named.
// The layout is the list's: ranks of one job run one binary, so it needs no version of its own
// (lineage carries one).
#ifndef GPUPOOL_INTERNAL_TASK_OPTIONS_CODEC_H_
#define GPUPOOL_INTERNAL_TASK_OPTIONS_CODEC_H_

#include "gpupool/codec.h"
#include "gpupool/task_options.h"

namespace gpupool {

template <>
struct Codec<TaskOptions> {
#define GPUPOOL_INTERNAL_ENCODE_TASK_OPTION(Type, field, ...) gpupool::Encode(w, o.field);
#define GPUPOOL_INTERNAL_DECODE_TASK_OPTION(Type, field, ...) o.field = gpupool::Decode<Type>(r);
  static void Encode(Writer& w, const TaskOptions& o) {
    GPUPOOL_TASK_OPTIONS(GPUPOOL_INTERNAL_ENCODE_TASK_OPTION)
  }
  static TaskOptions Decode(Reader& r) {
    TaskOptions o;
    GPUPOOL_TASK_OPTIONS(GPUPOOL_INTERNAL_DECODE_TASK_OPTION)
    return o;
  }
#undef GPUPOOL_INTERNAL_ENCODE_TASK_OPTION
#undef GPUPOOL_INTERNAL_DECODE_TASK_OPTION
};

}  // namespace gpupool

#endif  // GPUPOOL_INTERNAL_TASK_OPTIONS_CODEC_H_
