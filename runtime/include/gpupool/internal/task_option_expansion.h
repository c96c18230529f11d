// File: gpupool/internal/task_option_expansion.h
//
// NOT SUPPORTED API. Installed because TaskOptions and TaskBuilder are generated with it; it may
// change in any release without notice. Include gpupool/task_options.h instead.
//
// What one row of GPUPOOL_TASK_OPTIONS (gpupool/task_option_list.h) becomes: a field, a setter on
// TaskOptions, a forwarding setter on TaskBuilder. Each takes the whole row; the setters dispatch
// on its KIND (VALUE, FLAG, ENTRY).
#ifndef GPUPOOL_INTERNAL_TASK_OPTION_EXPANSION_H_
#define GPUPOOL_INTERNAL_TASK_OPTION_EXPANSION_H_

#include <string>
#include <utility>

// `Type field = default;`
#define GPUPOOL_INTERNAL_TASK_OPTION_FIELD(Type, field, Setter, KIND, py_name, default_value, doc) \
  Type field = default_value;

// TaskOptions' chained setter.
#define GPUPOOL_INTERNAL_TASK_OPTION_SETTER(Type, field, Setter, KIND, py_name, default_value, doc) \
  GPUPOOL_INTERNAL_TASK_OPTION_SETTER_##KIND(Type, field, Setter)
#define GPUPOOL_INTERNAL_TASK_OPTION_SETTER_VALUE(Type, field, Setter) \
  TaskOptions& Setter(Type v) {                                        \
    field = std::move(v);                                              \
    return *this;                                                      \
  }
#define GPUPOOL_INTERNAL_TASK_OPTION_SETTER_FLAG(Type, field, Setter) \
  TaskOptions& Setter(bool on = true) {                               \
    field = on;                                                       \
    return *this;                                                     \
  }
#define GPUPOOL_INTERNAL_TASK_OPTION_SETTER_ENTRY(Type, field, Setter) \
  TaskOptions& Setter(std::string k, std::string v) {                  \
    field[std::move(k)] = std::move(v);                                \
    return *this;                                                      \
  }

// TaskBuilder's setter of the same name and shape, forwarding to its TaskOptions `options_`.
#define GPUPOOL_INTERNAL_TASK_BUILDER_SETTER(Type, field, Setter, KIND, py_name, default_value, doc) \
  GPUPOOL_INTERNAL_TASK_BUILDER_SETTER_##KIND(Type, Setter)
#define GPUPOOL_INTERNAL_TASK_BUILDER_SETTER_VALUE(Type, Setter) \
  TaskBuilder& Setter(Type v) {                                  \
    options_.Setter(std::move(v));                               \
    return *this;                                                \
  }
#define GPUPOOL_INTERNAL_TASK_BUILDER_SETTER_FLAG(Type, Setter) \
  TaskBuilder& Setter(bool on = true) {                         \
    options_.Setter(on);                                        \
    return *this;                                               \
  }
#define GPUPOOL_INTERNAL_TASK_BUILDER_SETTER_ENTRY(Type, Setter) \
  TaskBuilder& Setter(std::string k, std::string v) {            \
    options_.Setter(std::move(k), std::move(v));                 \
    return *this;                                                \
  }

#endif  // GPUPOOL_INTERNAL_TASK_OPTION_EXPANSION_H_
