// The `gpupool._gpupool_core` extension module. Errors: gpupool::Error becomes
// gpupool.GpupoolError with the status code's name in `code`; gpupool::TaskError becomes
// gpupool.TaskError (a GpupoolError) that also carries task_name, location, original_message and
// the task's own pickled exception in `cause` (the package re-raises that type).
#include <pybind11/pybind11.h>

#include "gpupool/gpupool.h"
#include "python/bindings.h"

namespace gpupool::python {

const char* CodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kCancelled: return "CANCELLED";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kAlreadyExists: return "ALREADY_EXISTS";
    case ErrorCode::kPermissionDenied: return "PERMISSION_DENIED";
    case ErrorCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case ErrorCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kOutOfRange: return "OUT_OF_RANGE";
    case ErrorCode::kUnimplemented: return "UNIMPLEMENTED";
    case ErrorCode::kUnavailable: return "UNAVAILABLE";
    case ErrorCode::kDataLoss: return "DATA_LOSS";
    case ErrorCode::kUnauthenticated: return "UNAUTHENTICATED";
    case ErrorCode::kUnknown: return "UNKNOWN";
    default: return "INTERNAL";
  }
}

ErrorCode CodeFromName(std::string_view name) {
  for (int c = static_cast<int>(ErrorCode::kCancelled); c <= static_cast<int>(ErrorCode::kUnauthenticated); ++c) {
    if (name == CodeName(static_cast<ErrorCode>(c))) return static_cast<ErrorCode>(c);
  }
  return ErrorCode::kUnknown;
}

void BindErrors(py::module_& m) {
  static py::exception<Error> error_type(m, "GpupoolError");
  static py::exception<TaskError> task_error_type(m, "TaskError", error_type.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TaskError& e) {
      py::object instance = py::handle(task_error_type.ptr())(e.what());
      instance.attr("code") = CodeName(e.code());
      instance.attr("task_name") = e.task_name();
      instance.attr("location") = e.location();
      instance.attr("original_message") = e.original_message();
      instance.attr("cause") = py::bytes(e.cause());
      PyErr_SetObject(task_error_type.ptr(), instance.ptr());
    } catch (const Error& e) {
      py::object instance = py::handle(error_type.ptr())(e.what());
      instance.attr("code") = CodeName(e.code());
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });
}

}  // namespace gpupool::python

PYBIND11_MODULE(_gpupool_core, m) {
  m.doc() = "gpupool's C++ core (use the `gpupool` package, not this module)";
  m.def("version", &gpupool::Version, "The version of libgpupool_runtime");
  gpupool::python::BindErrors(m);
  gpupool::python::BindPool(m);
  gpupool::python::BindTasks(m);
}
