// The pieces of the `gpupool._gpupool_core` extension. It binds the public C++ API only, nothing
// internal (DESIGN §4: python/ uses only the public API).
#ifndef GPUPOOL_PYTHON_BINDINGS_H_
#define GPUPOOL_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <string_view>

#include "gpupool/error.h"

namespace gpupool::python {

namespace py = pybind11;

// ErrorCode <-> the names Python sees in GpupoolError.code ("INVALID_ARGUMENT", ...).
const char* CodeName(ErrorCode code);
ErrorCode CodeFromName(std::string_view name);  // kUnknown for names it does not know

void BindErrors(py::module_& m);  // GpupoolError, TaskError and the translation of gpupool::Error
void BindPool(py::module_& m);    // describe_pool
void BindTasks(py::module_& m);   // the runtime, remote functions, refs, get/wait/put/cancel

}  // namespace gpupool::python

#endif  // GPUPOOL_PYTHON_BINDINGS_H_
