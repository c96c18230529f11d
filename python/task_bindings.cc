// gpupool's task API for Python, over the same runtime as the C++ API.
//
// A Python remote function is registered under "module.qualname". All Python tasks go through one
// C++ remote function, registered here with its own invoker: its encoded arguments are the
// function's name, where the top-level ObjectRef arguments go, and the pickled (args, kwargs). Those
// ObjectRefs are the task's dependencies, so the task starts when they exist and receives their
// values, as in Ray; refs nested deeper travel as refs and are kept alive until the task ran.
//
// Values are stored pickled (protocol 5) as PyValue, together with the refs pickled inside them
// (an ObjectRef pickles as its id and notes itself in the runtime's nested-ref sink), so a stored
// list of refs keeps its objects alive. Storing bytes, not live Python objects, means no runtime
// thread ever needs the GIL to free a value, and the same bytes can leave the process later.
//
// Tasks anywhere (runtime/tasks/worker_pool.h): when the runtime may send tasks to worker
// processes on other nodes, a remote function is exported once — cloudpickled (so functions
// defined in __main__ travel, as in Ray) into an object of its own — and each of its tasks names
// that object's id in its arguments and holds it (as a nested ref) until it ran. In the driver
// the function comes from the registry; a worker (`python -m gpupool.worker`) imports the export
// from its driver the first time it meets the id (detail::ImportFromDriver), unpickles it once and
// keeps it. Refs nested in arguments become the driver's objects the same way when unpickled,
// their values fetched when read.
//
// The GIL: a task's invoker takes it to run the function; get, wait, shutdown and sleeps release
// it while they block. Python tasks of one process therefore take turns on the interpreter except
// where they release it (NumPy, PyTorch kernels, I/O), as with Python threads.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpupool/gpupool.h"
#include "gpupool/internal/object_header.h"
#include "gpupool/internal/remote_function.h"
#include "gpupool/internal/task_submission.h"
#include "python/bindings.h"

namespace gpupool::python {

// A Python value in the object store.
struct PyValue {
  std::string pickled;
  std::vector<ObjectRef<PyValue>> refs;  // refs pickled inside it, kept alive with it
};
using PyRef = ObjectRef<PyValue>;

// The binding is a client of the runtime's internals (gpupool/internal/): it adopts the headers
// the library returns and hands refs' headers to it, as the C++ templates do.
inline PyRef AdoptRef(detail::ObjectHeader* h) { return detail::ObjectRefAccess::Adopt<PyValue>(h); }
inline detail::ObjectHeader* HeaderOf(const PyRef& r) { return detail::ObjectRefAccess::Header(r); }

}  // namespace gpupool::python

// How a PyValue leaves the process (later: to another rank): its pickle and its refs' ids.
template <>
struct gpupool::Codec<gpupool::python::PyValue> {
  static void Encode(Writer& w, const python::PyValue& v) {
    gpupool::Encode(w, v.pickled);
    gpupool::Encode(w, v.refs);
  }
  static python::PyValue Decode(Reader& r) {
    python::PyValue v;
    v.pickled = gpupool::Decode<std::string>(r);
    v.refs = gpupool::Decode<std::vector<python::PyRef>>(r);
    return v;
  }
};

namespace gpupool::python {
namespace {

// Python objects the module needs on every task. Deliberately leaked: destroying them after the
// interpreter finalised would crash, and the process is ending anyway.
struct ModuleState {
  py::object dumps;             // pickle.dumps
  py::object loads;             // pickle.loads
  py::object format_exception_only;
  py::object format_tb;
  py::object error_type;        // gpupool.GpupoolError
  py::dict functions;           // "module.qualname" -> callable
  py::object ref_from_id;       // gpupool._tasks._ref_from_id, for ObjectRef.__reduce__ (a
                                // Python function, so pickle can name it)
  py::dict exported;            // in a worker: export id -> the function unpickled from it
  py::set own_exports;          // the ids of the exports this process made (_export)
};
ModuleState* state = nullptr;

// Whether this process is a worker serving a driver elsewhere (gpupool.worker); set once, before
// any task runs.
bool in_worker = false;

// Set by _init: whether tasks may run in worker processes (joined to a shared pool by address and
// not local_only), so remote functions must be exported; and which runtime exports belong to.
bool uses_workers = false;
uint64_t runtime_generation = 0;

// The process's runtime, when Python started it. Leaked for the same reason as ModuleState; the
// package's atexit hook shuts it down while the interpreter is still alive.
std::unique_ptr<Runtime>* runtime_holder = new std::unique_ptr<Runtime>();

thread_local TaskContext* current_context = nullptr;

class ContextScope {
 public:
  explicit ContextScope(TaskContext* context) : previous_(current_context) { current_context = context; }
  ~ContextScope() { current_context = previous_; }

 private:
  TaskContext* previous_;
};

// Pickles `obj`; refs met inside are retained and appended to `refs`.
py::bytes Pickle(py::handle obj, std::vector<detail::ObjectHeader*>* refs) {
  std::vector<detail::ObjectHeader*>* previous = detail::nested_refs_sink;
  detail::nested_refs_sink = refs;
  try {
    py::bytes out = state->dumps(obj, 5);
    detail::nested_refs_sink = previous;
    return out;
  } catch (...) {
    detail::nested_refs_sink = previous;
    throw;
  }
}

PyValue MakeValue(py::handle obj) {
  std::vector<detail::ObjectHeader*> refs;
  PyValue value;
  try {
    py::bytes bytes = Pickle(obj, &refs);
    value.pickled = static_cast<std::string_view>(bytes);
  } catch (...) {
    for (detail::ObjectHeader* h : refs) detail::Release(h);
    throw;
  }
  value.refs.reserve(refs.size());
  for (detail::ObjectHeader* h : refs) value.refs.push_back(AdoptRef(h));
  return value;
}

py::object Unpickle(std::string_view bytes) {
  return state->loads(py::memoryview::from_memory(bytes.data(), static_cast<py::ssize_t>(bytes.size())));
}

// A stored value; one sent to this worker as bytes (detail::EncodedValue) is decoded into `scratch`.
const PyValue& ValueOf(detail::ObjectHeader* h, PyValue* scratch = nullptr) {
  const detail::ValueBox& box = detail::AwaitValue(h, std::chrono::steady_clock::time_point::max());
  const std::string* encoded = detail::EncodedBytesOf(box);
  if (scratch != nullptr && encoded != nullptr) {
    Reader r(*encoded);
    *scratch = Codec<PyValue>::Decode(r);
    return *scratch;
  }
  return detail::ValueAs<PyValue>(h->id, box);
}

// Where a dependency's value goes: the index-th positional argument or the keyword `name`.
constexpr uint64_t kPositional = 0;
constexpr uint64_t kKeyword = 1;

void InvokePython(detail::TaskCall& call);
const detail::FunctionInfo* python_function = nullptr;

// A task whose Python function raised: the message names the exception and carries the traceback;
// the exception itself travels pickled (when it can be) so get() re-raises its type.
[[noreturn]] void ThrowPythonFailure(py::error_already_set& e) {
  std::string message;
  std::string cause;
  ErrorCode code = ErrorCode::kUnknown;
  try {
    py::object value = e.value();
    for (py::handle line : state->format_exception_only(e.type(), value)) message += py::str(line).cast<std::string>();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    std::string trace;
    if (e.trace()) {
      for (py::handle line : state->format_tb(e.trace())) trace += py::str(line).cast<std::string>();
    }
    if (!trace.empty()) message += "\nTraceback of the task (most recent call last):\n" + trace;
    if (py::isinstance(value, state->error_type) && py::hasattr(value, "code")) {
      code = CodeFromName(py::str(value.attr("code")).cast<std::string>());
    }
    try {
      cause = static_cast<std::string_view>(py::bytes(state->dumps(value, 5)));
    } catch (py::error_already_set&) {
      // Not picklable: the caller gets TaskError with the message and traceback only.
    }
  } catch (py::error_already_set& inner) {
    message = std::string("a Python exception that could not be formatted: ") + inner.what();
  }
  throw ErrorWithCause(code, message, std::move(cause));
}

// The driver's object `id` in this worker: its value is fetched when it is read.
PyRef ImportFromDriver(uint64_t id) {
  detail::ObjectHeader* h;
  {
    py::gil_scoped_release release;
    h = detail::ImportFromDriver(id, &detail::DecodeBox<PyValue>);
  }
  return AdoptRef(h);
}

// The function in an export (the cloudpickled function a task carries the id of). In a worker,
// imported from the driver and kept per export id (a worker serves one runtime; with no export,
// from a module the worker imported). In the driver, the copy a worker's task sent with a GPU task
// it submitted: read each time, never kept (ids restart with each runtime, and a closure per call
// would pile up).
py::object ExportedFunction(const std::string& key, uint64_t export_id) {
  if (export_id == 0) return state->functions.attr("get")(key);
  py::int_ id(export_id);
  if (in_worker && state->exported.contains(id)) return state->exported[id];
  py::object fn;
  try {
    PyRef blob = in_worker ? ImportFromDriver(export_id) : AdoptRef(detail::LookupObject(export_id));
    {
      py::gil_scoped_release release;  // while it travels
      (void)detail::AwaitValue(HeaderOf(blob), std::chrono::steady_clock::time_point::max());
    }
    PyValue scratch;
    fn = Unpickle(ValueOf(HeaderOf(blob), &scratch).pickled);
  } catch (py::error_already_set& e) {
    throw Error(ErrorCode::kFailedPrecondition,
                "the function '" + key + "' could not be loaded in this " + (in_worker ? "worker" : "driver") +
                    " (is its module importable here" + (in_worker ? ", with the driver's sys.path" : "") +
                    "?): " + std::string(e.what()));
  } catch (const Error& e) {
    throw Error(e.code(), "the function '" + key + "' could not be loaded in this " +
                              (in_worker ? "worker" : "driver") + ": its export: " + e.what());
  }
  if (in_worker) state->exported[id] = fn;
  return fn;
}

void InvokePython(detail::TaskCall& call) {
  if (!Py_IsInitialized()) throw Error(ErrorCode::kUnavailable, "the Python interpreter has shut down");
  py::gil_scoped_acquire gil;
  // The runtime's threads run task after task: keep this thread's Python thread state while the
  // thread lives instead of letting pybind create and destroy one per task (a measurable share of
  // a no-op task), and give it back when the thread ends (lease threads come and go).
  struct KeptThreadState {
    bool kept = false;
    ~KeptThreadState() {
      if (!kept || !Py_IsInitialized()) return;
      py::gil_scoped_acquire gil;
      gil.dec_ref();  // the inc_ref below; this scope's own release then deletes the state
    }
  };
  thread_local KeptThreadState keep;
  if (!keep.kept) {
    gil.inc_ref();
    keep.kept = true;
  }
  Reader r(call.args);
  std::string key = Decode<std::string>(r);
  const uint64_t export_id = r.Varint("the function's export id");
  size_t n = r.Count("the dependency positions");
  struct Position {
    uint64_t kind;
    uint64_t index;
    std::string name;
  };
  std::vector<Position> positions(n);
  for (Position& p : positions) {
    p.kind = r.Varint("a dependency position");
    if (p.kind == kPositional) {
      p.index = r.Varint("a positional index");
    } else if (p.kind == kKeyword) {
      p.name = Decode<std::string>(r);
    } else {
      throw Error(ErrorCode::kDataLoss, "unknown dependency position kind " + std::to_string(p.kind));
    }
  }
  if (n != call.dep_count) throw Error(ErrorCode::kDataLoss, "dependency count does not match the arguments");
  std::string_view payload = r.Take(r.remaining(), "the pickled arguments");
  ContextScope scope(call.context);
  try {
    // A worker runs what the export holds; so does the driver for a task a worker's task submitted
    // (its closure is that call's, not whatever this process registered under the same name).
    const bool from_export =
        in_worker || (export_id != 0 && !state->own_exports.contains(py::int_(export_id)));
    py::object fn = from_export ? ExportedFunction(key, export_id) : state->functions.attr("get")(key);
    if (fn.is_none()) {
      throw Error(ErrorCode::kNotFound,
                  "Python function '" + key + "' is not registered in this process: decorate it with "
                  "@gpupool.remote at module level");
    }
    py::tuple args_kwargs = Unpickle(payload);
    py::list args(args_kwargs[0]);
    py::dict kwargs = args_kwargs[1];
    for (size_t i = 0; i < n; ++i) {
      PyValue scratch;
      py::object value = Unpickle(ValueOf(call.deps[i], &scratch).pickled);
      if (positions[i].kind == kPositional) {
        args[positions[i].index] = value;
      } else {
        kwargs[py::str(positions[i].name)] = value;
      }
    }
    py::object result = fn(*py::tuple(args), **kwargs);
    PyValue value = MakeValue(result);
    // In a worker, refs in the result go to the driver when it is sent (the worker keeps its own
    // objects for the driver: runtime ExportObject).
    call.result = std::make_unique<detail::TypedBox<PyValue>>(std::move(value));
  } catch (py::error_already_set& e) {
    ThrowPythonFailure(e);
  }
}

// The top-level ObjectRefs of (args, kwargs) become dependencies; None holds their place.
// `exported`: the function's export (see the top of the file), or an empty ref.
detail::EncodedArgs EncodePythonCall(const std::string& key, py::tuple args, py::dict kwargs, const PyRef* exported) {
  detail::EncodedArgs out;
  Writer w(out.bytes);
  Encode(w, key);
  std::string positions;
  Writer pw(positions);
  py::object call_args = args;
  py::object call_kwargs = kwargs;
  try {
    // The export's id (0: none); the task holds the export until it ran, so a worker can import it.
    if (exported != nullptr && !exported->empty()) {
      detail::ObjectHeader* header = HeaderOf(*exported);
      detail::Retain(header);
      out.nested.push_back(header);
      w.Varint(exported->id());
    } else {
      w.Varint(0);
    }
    py::list replaced_args;
    bool args_changed = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (py::isinstance<PyRef>(args[i])) {
        detail::ObjectHeader* header = HeaderOf(args[i].cast<const PyRef&>());
        if (header == nullptr) throw Error(ErrorCode::kInvalidArgument, "an empty ObjectRef was passed as an argument");
        detail::Retain(header);
        out.deps.push_back(header);
        if (!args_changed) {
          replaced_args = py::list(args);  // a new list: args is a tuple
          args_changed = true;
        }
        replaced_args[i] = py::none();
        pw.Varint(kPositional);
        pw.Varint(i);
      }
    }
    if (args_changed) call_args = py::tuple(replaced_args);
    py::dict replaced_kwargs;
    bool kwargs_changed = false;
    for (auto [name, value] : kwargs) {
      if (!py::isinstance<PyRef>(value)) continue;
      detail::ObjectHeader* header = HeaderOf(value.cast<const PyRef&>());
      if (header == nullptr) throw Error(ErrorCode::kInvalidArgument, "an empty ObjectRef was passed as an argument");
      detail::Retain(header);
      out.deps.push_back(header);
      if (!kwargs_changed) {
        // A copy: py::dict(kwargs) would alias the caller's dict, and replacing the ref in it could
        // drop the ref's last Python owner.
        replaced_kwargs = kwargs.attr("copy")();
        kwargs_changed = true;
      }
      replaced_kwargs[name] = py::none();
      pw.Varint(kKeyword);
      Encode(pw, py::str(name).cast<std::string>());
    }
    if (kwargs_changed) call_kwargs = replaced_kwargs;
    w.Varint(out.deps.size());
    w.Bytes(positions.data(), positions.size());
    py::bytes payload = Pickle(py::make_tuple(call_args, call_kwargs), &out.nested);
    std::string_view bytes = payload;
    w.Bytes(bytes.data(), bytes.size());
  } catch (...) {
    for (detail::ObjectHeader* h : out.deps) detail::Release(h);
    for (detail::ObjectHeader* h : out.nested) detail::Release(h);
    throw;
  }
  return out;
}

// A TaskContext as Python sees it: usable only inside its task, on the task's thread.
class PyTaskContext {
 public:
  explicit PyTaskContext(TaskContext* context) : context_(context) {}
  TaskContext& get() const {
    if (current_context != context_) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "this TaskContext belongs to a task that has finished or runs on another thread");
    }
    return *context_;
  }

 private:
  TaskContext* context_;
};

// A Python object that may be released on a thread without the GIL.
ReduceOp ParseReduceOp(const std::string& op) {
  if (op == "sum") return ReduceOp::kSum;
  if (op == "max") return ReduceOp::kMax;
  if (op == "min") return ReduceOp::kMin;
  throw Error(ErrorCode::kInvalidArgument, "allreduce: op must be 'sum', 'max' or 'min', not '" + op + "'");
}

template <typename T>
void ReduceWithoutGil(TaskContext& context, void* data, size_t count, ReduceOp op) {
  py::gil_scoped_release release;
  context.AllReduce(static_cast<T*>(data), count, op);
}

py::object AllReduceBuffer(const PyTaskContext& c, py::object values, const std::string& op_name) {
  TaskContext& context = c.get();
  const ReduceOp op = ParseReduceOp(op_name);
  if (py::isinstance<py::list>(values) || py::isinstance<py::tuple>(values)) {
    std::vector<double> v = values.cast<std::vector<double>>();
    ReduceWithoutGil<double>(context, v.data(), v.size(), op);
    return py::cast(v);
  }
  if (!PyObject_CheckBuffer(values.ptr())) {
    throw Error(ErrorCode::kInvalidArgument, "allreduce takes a buffer (numpy array, array.array) or a list");
  }
  py::buffer_info info = values.cast<py::buffer>().request(/*writable=*/true);
  bool contiguous = info.ndim == 0 || info.strides.back() == info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d > 0 && contiguous; --d) {
    contiguous = info.strides[d - 1] == info.strides[d] * info.shape[d];
  }
  if (!contiguous) throw Error(ErrorCode::kInvalidArgument, "allreduce needs a contiguous buffer");
  const size_t count = static_cast<size_t>(info.size);
  const char kind = info.format.empty() ? '?' : info.format.back();  // '<f' and 'f' alike
  if (kind == 'f' && info.itemsize == 4) {
    ReduceWithoutGil<float>(context, info.ptr, count, op);
  } else if (kind == 'd' && info.itemsize == 8) {
    ReduceWithoutGil<double>(context, info.ptr, count, op);
  } else if ((kind == 'i' || kind == 'l') && info.itemsize == 4) {
    ReduceWithoutGil<int32_t>(context, info.ptr, count, op);
  } else if ((kind == 'l' || kind == 'q') && info.itemsize == 8) {
    ReduceWithoutGil<int64_t>(context, info.ptr, count, op);
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "allreduce: elements of format '" + info.format + "' (" + std::to_string(info.itemsize) +
                    " bytes) are not float32, float64, int32 or int64");
  }
  return values;
}

std::shared_ptr<py::object> HoldWithGil(py::object obj) {
  return std::shared_ptr<py::object>(new py::object(std::move(obj)), [](py::object* o) {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: leak rather than crash
    py::gil_scoped_acquire gil;
    delete o;
  });
}

py::dict SlotToDict(const SlotInfo& s) {
  py::dict d;
  d["node"] = s.node;
  d["gpu_index"] = s.gpu_index;
  d["model"] = s.model;
  d["cuda_device"] = s.cuda_device;
  d["kind"] = s.kind;
  d["compute_share"] = s.compute_milli / 1000.0;
  d["memory_budget_bytes"] = s.memory_budget_bytes;
  return d;
}

py::dict StatsToDict(const RuntimeStats& s) {
  py::list teams;
  for (const TeamUsage& t : s.teams) {
    py::dict d;
    d["team"] = t.team;
    d["leased_gpu_hours"] = t.leased_gpu_hours;
    d["borrowed_gpu_hours"] = t.borrowed_gpu_hours;
    d["busy_gpu_hours"] = t.busy_gpu_hours;
    d["leases"] = t.leases;
    d["tasks_run"] = t.tasks_run;
    d["tasks_failed"] = t.tasks_failed;
    d["preemptions"] = t.preemptions;
    d["snapshots"] = t.snapshots;
    d["lost_gpu_hours"] = t.lost_gpu_hours;
    teams.append(d);
  }
  py::dict d;
  d["pool_time_s"] = s.pool_time_s;
  d["pool_gpus"] = s.pool_gpus;
  d["teams"] = teams;
  d["scrubbed_bytes"] = s.scrubbed_bytes;
  d["live_objects"] = s.live_objects;
  d["objects_kept_by_workers"] = s.objects_kept_by_workers;
  d["objects_rebuilt"] = s.objects_rebuilt;
  d["bytes_fetched_from_workers"] = s.bytes_fetched_from_workers;
  d["bytes_fetched_by_workers"] = s.bytes_fetched_by_workers;
  d["objects_fetched_over_ucx"] = s.objects_fetched_over_ucx;
  d["queued_tasks"] = s.queued_tasks;
  d["waiting_for_dependencies"] = s.waiting_for_dependencies;
  py::list overdue;
  for (const OverdueTask& o : s.overdue) {
    overdue.append(py::dict(py::arg("task") = o.task, py::arg("task_id") = o.task_id, py::arg("team") = o.team,
                            py::arg("since_safe_point_s") = o.since_safe_point_s, py::arg("interval_s") = o.interval_s));
  }
  d["overdue"] = overdue;
  return d;
}

std::chrono::steady_clock::time_point DeadlineAfter(std::optional<double> timeout_s) {
  if (!timeout_s) return std::chrono::steady_clock::time_point::max();
  if (*timeout_s < 0) throw Error(ErrorCode::kInvalidArgument, "timeout must not be negative");
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(*timeout_s));
}

}  // namespace

void BindTasks(py::module_& m) {
  state = new ModuleState();
  py::module_ pickle = py::module_::import("pickle");
  py::module_ traceback = py::module_::import("traceback");
  state->dumps = pickle.attr("dumps");
  state->loads = pickle.attr("loads");
  state->format_exception_only = traceback.attr("format_exception_only");
  state->format_tb = traceback.attr("format_tb");
  state->error_type = m.attr("GpupoolError");
  state->functions = py::dict();
  m.attr("_functions") = state->functions;
  static int python_function_marker = 0;
  python_function = detail::RegisterFunction("gpupool.python", &python_function_marker, &InvokePython,
                                             &detail::DecodeBox<PyValue>);

  py::class_<PyRef>(m, "ObjectRef", "A value in the object store: a task's future result or a put() value.")
      .def_property_readonly("id", &PyRef::id, "The object's id, unique in the job")
      .def("ready", &PyRef::ready, "Whether the value (or its failure) is there, without waiting")
      .def("__repr__", [](const PyRef& r) { return "ObjectRef(" + std::to_string(r.id()) + ")"; })
      .def("__eq__", [](const PyRef& a, py::object b) {
        return py::isinstance<PyRef>(b) && HeaderOf(a) == HeaderOf(b.cast<const PyRef&>());
      })
      .def("__hash__", [](const PyRef& r) { return std::hash<uint64_t>()(r.id()); })
      .def("__reduce__", [](const PyRef& r) {
        if (r.empty()) throw Error(ErrorCode::kInvalidArgument, "an empty ObjectRef cannot be pickled");
        if (!state->ref_from_id) state->ref_from_id = py::module_::import("gpupool._tasks").attr("_ref_from_id");
        detail::NoteNestedRef(HeaderOf(r));  // keeps it alive with whatever it is pickled into
        return py::make_tuple(state->ref_from_id, py::make_tuple(r.id()));
      });
  m.def("_ref_from_id", [](uint64_t id) { return AdoptRef(detail::LookupObject(id)); });
  m.def("_import_from_driver", &ImportFromDriver);

  py::class_<TaskOptions>(m, "_TaskOptions");
  // The task options' Python keywords and C++ defaults, from GPUPOOL_TASK_OPTIONS
  // (gpupool/task_option_list.h): {keyword: (default, doc)}, in the list's order.
  py::dict option_table;
#define GPUPOOL_PY_OPTION_ENTRY(Type, field, Setter, KIND, py_name, default_value, doc) \
  option_table[py_name] = py::make_tuple(py::cast(TaskOptions().field), doc);
  GPUPOOL_TASK_OPTIONS(GPUPOOL_PY_OPTION_ENTRY)
#undef GPUPOOL_PY_OPTION_ENTRY
  m.attr("_TASK_OPTIONS") = option_table;
  // Keyword arguments only; one per row of the list, each optional (absent or None: the default).
  m.def("_make_options", [](py::kwargs settings) {
    TaskOptions o;
    size_t used = 0;
#define GPUPOOL_PY_OPTION_READ(Type, field, Setter, KIND, py_name, default_value, doc)              \
  if (settings.contains(py_name)) {                                                              \
    ++used;                                                                                      \
    py::object value = settings[py_name];                                                        \
    if (!value.is_none()) {                                                                      \
      try {                                                                                      \
        o.field = value.cast<Type>();                                                            \
      } catch (const py::cast_error&) {                                                          \
        throw py::type_error(std::string("task option ") + py_name + " cannot be " +             \
                             std::string(py::str(value.get_type().attr("__name__"))));          \
      }                                                                                          \
    }                                                                                            \
  }
    GPUPOOL_TASK_OPTIONS(GPUPOOL_PY_OPTION_READ)
#undef GPUPOOL_PY_OPTION_READ
    if (used != settings.size()) throw py::type_error("unknown task option(s) given to _make_options");
    if (!(o.gpus >= 0)) throw Error(ErrorCode::kInvalidArgument, "gpus must be 0 (CPU), a fraction below 1, or a whole number; got " + std::to_string(o.gpus));
    if (o.gpu_memory_mib < 0) throw Error(ErrorCode::kInvalidArgument, "gpu_memory_mib must not be negative");
    if (o.max_retries < 0) throw Error(ErrorCode::kInvalidArgument, "max_retries must not be negative");
    return o;
  });

  m.def("_register", [](const std::string& key, py::object fn) { state->functions[py::str(key)] = fn; });
  m.def(
      "_submit",
      [](const std::string& key, py::tuple args, py::dict kwargs, const TaskOptions& options,
         std::optional<PyRef> exported) {
        detail::EncodedArgs call = EncodePythonCall(key, args, kwargs, exported ? &*exported : nullptr);
        if (!in_worker) return AdoptRef(detail::SubmitTask(python_function, std::move(call), &options));
        // In a worker a GPU task goes to the driver and waits for its answer (and for the values
        // of this worker's objects among its arguments, which its CPU tasks may still compute):
        // without the interpreter lock.
        detail::ObjectHeader* result;
        {
          py::gil_scoped_release release;
          result = detail::SubmitTask(python_function, std::move(call), &options);
        }
        return AdoptRef(result);
      },
      py::arg("key"), py::arg("args"), py::arg("kwargs"), py::arg("options"), py::arg("exported") = py::none());
  // A function's export: an object whose stored pickle is the (cloud)pickled function itself.
  m.def("_export", [](py::bytes pickled) {
    PyValue value;
    value.pickled = static_cast<std::string_view>(pickled);
    PyRef ref = AdoptRef(detail::PutValue(std::make_unique<detail::TypedBox<PyValue>>(std::move(value))));
    state->own_exports.add(py::int_(ref.id()));
    return ref;
  });
  m.def("_uses_workers", []() { return static_cast<bool>(*runtime_holder) && uses_workers; });
  m.def("_runtime_generation", []() { return runtime_generation; });
  m.def("_in_worker", []() { return in_worker; });
  // A worker process (python -m gpupool.worker, started by a node's agent): serves the driver
  // until told to stop, then ends the process; never returns.
  m.def("_serve_worker", [](std::vector<std::string> args) {
    if (std::find(args.begin(), args.end(), "--gpupool-worker") == args.end()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "gpupool.worker is started by a node's agent for a job (with --gpupool-worker), not by hand");
    }
    in_worker = true;
    std::vector<char*> argv;
    std::string program = "python";
    argv.push_back(program.data());
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = static_cast<int>(argv.size()) - 1;
    py::gil_scoped_release release;  // the worker's task threads take it to run Python
    Init(argc, argv.data());         // a worker's Init serves and exits
  });
  m.def("_get", [](const PyRef& ref, std::optional<double> timeout_s) {
    if (ref.empty()) throw Error(ErrorCode::kFailedPrecondition, "get on an empty ObjectRef");
    std::optional<View<PyValue>> view;
    {
      py::gil_scoped_release release;
      view.emplace(ref.GetView(DeadlineAfter(timeout_s)));
    }
    return Unpickle((*view)->pickled);
  });
  m.def("_wait", [](const std::vector<PyRef>& refs, size_t num_returns, std::optional<double> timeout_s) {
    std::vector<detail::ObjectHeader*> headers;
    for (const PyRef& r : refs) {
      if (r.empty()) throw Error(ErrorCode::kFailedPrecondition, "wait on an empty ObjectRef");
      headers.push_back(HeaderOf(r));
    }
    std::unique_ptr<bool[]> ready(new bool[refs.size() + 1]());
    {
      py::gil_scoped_release release;
      detail::WaitObjects(headers.data(), headers.size(), num_returns, DeadlineAfter(timeout_s), ready.get());
    }
    return std::vector<bool>(ready.get(), ready.get() + refs.size());
  });
  m.def("_put", [](py::object value) {
    return AdoptRef(detail::PutValue(std::make_unique<detail::TypedBox<PyValue>>(MakeValue(value))));
  });
  m.def("_cancel", [](const PyRef& ref) { Cancel(ref); });

  m.def(
      "_init",
      [](std::optional<std::string> driver, std::optional<std::string> simulate, std::optional<int> nodes,
         std::optional<std::string> config, std::optional<std::string> config_text,
         std::optional<std::string> team, std::optional<double> clock_speed,
         std::optional<int> cpu_workers, std::optional<int> lease_linger_ms, std::optional<std::string> address,
         std::optional<std::string> token, std::optional<std::string> node, std::optional<bool> local_only,
         std::optional<bool> log_to_driver, std::optional<int> worker_linger_ms, std::optional<std::string> worker_python,
         std::optional<std::string> worker_path) {
        if (in_worker) {
          throw Error(ErrorCode::kFailedPrecondition,
                      "this process is a gpupool worker serving its driver: gpupool.init() is the driver's to call");
        }
        if (*runtime_holder) {
          throw Error(ErrorCode::kFailedPrecondition,
                      "gpupool is already initialised in this process: call gpupool.shutdown() first");
        }
        char program[] = "python";
        char* argv[] = {program, nullptr};
        int argc = 1;
        RuntimeOptions o = OptionsFromFlags(argc, argv);  // GPUPOOL_* environment
        if (driver) o.driver = *driver;
        if (simulate) o.simulate = *simulate;
        if (nodes) {
          if (*nodes < 1) throw Error(ErrorCode::kInvalidArgument, "nodes must be at least 1");
          o.node_count = *nodes;
        }
        if (config) o.config_path = *config;
        if (config_text) o.config_text = *config_text;
        if (team) o.team = *team;
        if (clock_speed) {
          if (!(*clock_speed > 0)) throw Error(ErrorCode::kInvalidArgument, "clock_speed must be positive");
          o.clock_speed = *clock_speed;
        }
        if (cpu_workers) {
          if (*cpu_workers < 0) throw Error(ErrorCode::kInvalidArgument, "cpu_workers must not be negative");
          o.cpu_workers = *cpu_workers;
        }
        if (lease_linger_ms) {
          if (*lease_linger_ms < 0) throw Error(ErrorCode::kInvalidArgument, "lease_linger_ms must not be negative");
          o.lease_linger_ms = *lease_linger_ms;
        }
        if (address) o.pool_address = *address;
        if (token) o.pool_token = *token;
        if (node) o.node_name = *node;
        if (local_only) o.local_only = *local_only;
        if (log_to_driver) o.log_to_driver = *log_to_driver;
        if (worker_linger_ms) {
          if (*worker_linger_ms < 0) throw Error(ErrorCode::kInvalidArgument, "worker_linger_ms must not be negative");
          o.worker_linger_ms = *worker_linger_ms;
        }
        // A task placed on another node runs in a worker the node's agent starts: this
        // interpreter running gpupool.worker, with the driver's module search path (the same
        // paths on every node, as the C++ worker assumes of its executable), unbuffered so its
        // output reaches the driver line by line.
        if (worker_python && o.worker_binary.empty()) {
          o.worker_binary = *worker_python;
          o.worker_args = {"-m", "gpupool.worker"};
        }
        if (worker_path) o.worker_env["PYTHONPATH"] = *worker_path;
        o.worker_env["PYTHONUNBUFFERED"] = "1";
        const bool may_use_workers = !o.pool_address.empty() && !o.local_only;
        std::unique_ptr<Runtime> started;
        {
          py::gil_scoped_release release;  // starting may probe the driver
          started = std::make_unique<Runtime>(Init(std::move(o)));
        }
        // Published with the GIL held, together with what submit() reads beside it, so a thread
        // that sees the runtime also sees whether to export its functions.
        uses_workers = may_use_workers;
        ++runtime_generation;
        *runtime_holder = std::move(started);
        return (*runtime_holder)->notice();
      },
      // Unset (None): from the environment, else the defaults.
      py::arg("driver") = py::none(), py::arg("simulate") = py::none(), py::arg("nodes") = py::none(),
      py::arg("config") = py::none(), py::arg("config_text") = py::none(), py::arg("team") = py::none(),
      py::arg("clock_speed") = py::none(), py::arg("cpu_workers") = py::none(),
      py::arg("lease_linger_ms") = py::none(), py::arg("address") = py::none(), py::arg("token") = py::none(),
      py::arg("node") = py::none(), py::arg("local_only") = py::none(), py::arg("log_to_driver") = py::none(),
      py::arg("worker_linger_ms") = py::none(), py::arg("worker_python") = py::none(),
      py::arg("worker_path") = py::none());
  m.def("_shutdown", []() {
    uses_workers = false;
    std::unique_ptr<Runtime> rt = std::move(*runtime_holder);
    py::gil_scoped_release release;  // running Python tasks need the GIL to finish
    rt.reset();
  });
  m.def("_initialized", []() { return in_worker || static_cast<bool>(*runtime_holder); });
  m.def("_rank", []() {
    if (!*runtime_holder) throw Error(ErrorCode::kFailedPrecondition, "gpupool is not initialised");
    return py::make_tuple((*runtime_holder)->rank(), (*runtime_holder)->ranks(), (*runtime_holder)->node());
  });
  m.def("_stats", []() {
    if (!*runtime_holder) throw Error(ErrorCode::kFailedPrecondition, "gpupool is not initialised");
    return StatsToDict((*runtime_holder)->Stats());
  });

  py::class_<PyTaskContext>(m, "TaskContext", "Where a running task runs; see gpupool.context()")
      .def_property_readonly("task_name", [](const PyTaskContext& c) { return c.get().task_name(); })
      .def_property_readonly("task_id", [](const PyTaskContext& c) { return c.get().task_id(); })
      .def_property_readonly("team", [](const PyTaskContext& c) { return c.get().team(); })
      .def_property_readonly("attempt", [](const PyTaskContext& c) { return c.get().attempt(); })
      .def_property_readonly("slots", [](const PyTaskContext& c) {
        py::list slots;
        for (const SlotInfo& s : c.get().slots()) slots.append(SlotToDict(s));
        return slots;
      })
      .def_property_readonly("cuda_device", [](const PyTaskContext& c) { return c.get().cuda_device(); })
      .def_property_readonly("memory_budget_bytes", [](const PyTaskContext& c) { return c.get().memory_budget_bytes(); })
      .def_property_readonly("memory_used_bytes", [](const PyTaskContext& c) { return c.get().memory_used_bytes(); })
      .def_property_readonly("cancelled", [](const PyTaskContext& c) { return c.get().cancelled(); })
      .def_property_readonly("pool_time_s", [](const PyTaskContext& c) { return c.get().pool_time_s(); })
      .def("step", [](const PyTaskContext& c) { c.get().Step(); },
           "A safe point: raises GpupoolError (code CANCELLED) when the task was cancelled or its lease revoked")
      .def(
          "checkpointable",
          [](const PyTaskContext& c, py::object get_state, py::object set_state) {
            // The state travels pickled; the callbacks run on the task's thread (which holds
            // the GIL whenever it is in Python) when a snapshot is taken or restored.
            // The runtime keeps the callbacks until the run ends, and drops them without the
            // GIL: hold the Python callables where dropping takes the GIL first.
            auto get = HoldWithGil(std::move(get_state));
            auto set = HoldWithGil(std::move(set_state));
            return c.get().Checkpointable(
                [get]() -> std::string {
                  py::gil_scoped_acquire gil;
                  py::bytes b = state->dumps((*get)(), 5);
                  return std::string(static_cast<std::string_view>(b));
                },
                [set](std::string_view bytes) {
                  py::gil_scoped_acquire gil;
                  (*set)(Unpickle(bytes));
                });
          },
          py::arg("get_state"), py::arg("set_state"),
          "Make the task checkpointable: get_state() returns a picklable object, set_state(obj) "
          "restores it. Returns the step to continue from (0 on a fresh start).")
      .def_property_readonly("resumed", [](const PyTaskContext& c) { return c.get().resumed(); })
      .def_property_readonly("step_count", [](const PyTaskContext& c) { return c.get().step(); })
      .def("sleep_pool_time", [](const PyTaskContext& c, double seconds) {
        TaskContext& context = c.get();
        py::gil_scoped_release release;
        context.SleepPoolTime(seconds);
      })
      // Collectives over the job's ranks (under mpirun; one rank otherwise), as in C++.
      .def_property_readonly("rank", [](const PyTaskContext& c) { return c.get().rank(); })
      .def_property_readonly("ranks", [](const PyTaskContext& c) { return c.get().ranks(); })
      .def("allreduce", &AllReduceBuffer, py::arg("buffer"), py::arg("op") = "sum",
           "Reduce a writable contiguous buffer of float32, float64, int32 or int64 (a numpy array, "
           "array.array, memoryview) across the ranks, in place; op: 'sum', 'max' or 'min'. A list "
           "of numbers is reduced as float64 and returned as a new list.")
      .def(
          "broadcast",
          // Objects travel as PyValues: the pickle and the ObjectRefs inside it, which cross
          // ranks as refs (their owner serves them; the receiver fetches them) exactly as in C++.
          [](const PyTaskContext& c, py::object obj, int root) -> py::object {
            TaskContext& context = c.get();
            PyValue value;
            if (context.rank() == root) value = MakeValue(obj);
            {
              py::gil_scoped_release release;
              context.BroadcastValue(root, value);
            }
            return context.rank() == root ? obj : Unpickle(value.pickled);
          },
          py::arg("obj"), py::arg("root") = 0,
          "Rank root's obj (pickled; ObjectRefs inside stay refs to root's objects) to every rank; returns it")
      .def(
          "send",
          [](const PyTaskContext& c, py::object obj, int dst, uint64_t tag) {
            TaskContext& context = c.get();
            PyValue value = MakeValue(obj);
            py::gil_scoped_release release;
            context.SendValue(dst, tag, value);
          },
          py::arg("obj"), py::arg("dst"), py::arg("tag") = 0,
          "Send obj (pickled; ObjectRefs inside stay refs, fetched by dst) to rank dst")
      .def(
          "recv",
          [](const PyTaskContext& c, int src, uint64_t tag) {
            TaskContext& context = c.get();
            PyValue value;
            {
              py::gil_scoped_release release;
              value = context.RecvValue<PyValue>(src, tag);  // imports the refs inside
            }
            return Unpickle(value.pickled);
          },
          py::arg("src"), py::arg("tag") = 0, "The next object rank src sent with tag");
  m.def("_context", []() -> py::object {
    if (current_context == nullptr) return py::none();
    return py::cast(PyTaskContext(current_context));
  });
}

}  // namespace gpupool::python
