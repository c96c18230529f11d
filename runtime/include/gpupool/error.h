// File: gpupool/error.h
//
// The one exception type of the public C++ API. Inside, gpupool passes absl::Status values; at the
// API edge a failure becomes a gpupool::Error carrying the same code and message, so callers can
// both print it and decide what to do (retry on kUnavailable, fix input on kInvalidArgument).
//
//   try { gpupool::DescribePool(options); }
//   catch (const gpupool::Error& e) { std::cerr << e.what() << "\n"; }
#ifndef GPUPOOL_ERROR_H_
#define GPUPOOL_ERROR_H_

#include <stdexcept>
#include <string>
#include <utility>

#include "gpupool/export.h"

namespace gpupool {

// Mirrors absl::StatusCode values, so the two convert without a table.
enum class ErrorCode {
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class GPUPOOL_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// A task failed: it threw, ran out of its memory budget, was cancelled, or exhausted its retries.
// what() reads "task 'Square' (task 12, attempt 1) on node-0/GPU 3: <the original message>".
class GPUPOOL_API TaskError : public Error {
 public:
  TaskError(ErrorCode code, const std::string& message, std::string task_name, std::string location,
            std::string original_message, std::string cause = {})
      : Error(code, message),
        task_name_(std::move(task_name)),
        location_(std::move(location)),
        original_message_(std::move(original_message)),
        cause_(std::move(cause)) {}
  const std::string& task_name() const { return task_name_; }
  const std::string& location() const { return location_; }  // "node-0/GPU 3", "cpu", ...
  const std::string& original_message() const { return original_message_; }
  // The original exception as its language binding serialised it (a pickled Python exception, so
  // Python's get() re-raises the task's own exception type); empty for C++ tasks.
  const std::string& cause() const { return cause_; }

 private:
  std::string task_name_;
  std::string location_;
  std::string original_message_;
  std::string cause_;
};

// Thrown by a language binding's task (Python) to hand the runtime its serialised exception,
// which the failed result's TaskError then carries in cause().
class GPUPOOL_API ErrorWithCause : public Error {
 public:
  ErrorWithCause(ErrorCode code, const std::string& message, std::string cause)
      : Error(code, message), cause_(std::move(cause)) {}
  const std::string& cause() const { return cause_; }

 private:
  std::string cause_;
};

}  // namespace gpupool

#endif  // GPUPOOL_ERROR_H_
