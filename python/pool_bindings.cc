// gpupool.describe_pool: the pool's nodes and GPUs as plain dicts, with the fields and values
// `gpupool devices --json` prints (tests/python/test_describe_pool.py compares them), plus the
// pool's "notice".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gpupool/gpupool.h"
#include "python/bindings.h"

namespace gpupool::python {

namespace {

// The Python converter: every field gpupool::ForEachField lists, under its name, as the JSON
// converter of `gpupool devices --json` (runtime/cli/pool_json.cc) walks the same list.
template <typename Record>
py::dict RecordToDict(const Record& record);

template <typename T>
py::object ValueToPython(const T& value) {
  if constexpr (kIsRecordList<T>) {
    py::list out;
    for (const auto& record : value) out.append(RecordToDict(record));
    return std::move(out);
  } else {
    return py::cast(value);
  }
}

template <typename Record>
py::dict RecordToDict(const Record& record) {
  py::dict out;
  ForEachField(record, [&](const char* name, const auto& value) { out[name] = ValueToPython(value); });
  return out;
}

}  // namespace

void BindPool(py::module_& m) {
  m.def(
      "describe_pool",
      [](const std::string& driver, const std::string& simulate, int node_count,
         const std::string& config) {
        gpupool::PoolOptions options{driver, simulate, node_count, config};
        gpupool::PoolDescription pool;
        {
          py::gil_scoped_release release;  // discovery may touch the driver for a while
          pool = gpupool::DescribePool(options);
        }
        py::dict out = RecordToDict(pool);
        out["notice"] = pool.notice;  // not a field of the pool (see ForEachField)
        return out;
      },
      py::arg("driver") = "", py::arg("simulate") = "", py::arg("node_count") = 1,
      py::arg("config") = "",
      "Discover the pool: real GPUs when present, else simulated. Returns a dict.");
}

}  // namespace gpupool::python
