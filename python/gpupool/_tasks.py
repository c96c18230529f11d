"""The Python task API: remote functions, ObjectRefs, get/wait/put/cancel, the runtime's lifetime.

Everything here is a thin layer over the C++ runtime (`_gpupool_core`): tasks are queued, leased
and run by the same job runtime and embedded pool as C++ tasks.
"""

import atexit
import functools
import os
import pickle
import sys
import threading
import weakref

from . import _gpupool_core as _core
from ._gpupool_core import GpupoolError, ObjectRef, TaskContext, TaskError

_init_lock = threading.Lock()

# True in a process=True task's worker process (gpupool._process_pool), which has no runtime.
_in_process_worker = False

_exports = weakref.WeakKeyDictionary()   # function -> (runtime generation, its export's ObjectRef)

_process_pool = None           # gpupool._process_pool.ProcessPool, made on the first process task
_process_pool_lock = threading.Lock()
_process_function_ids = iter(range(1, 1 << 62))


def _process_pool_instance():
    global _process_pool
    with _process_pool_lock:
        if _process_pool is None:
            from ._process_pool import ProcessPool
            _process_pool = ProcessPool(len(os.sched_getaffinity(0)))
        return _process_pool


def _close_process_pool():
    global _process_pool
    with _process_pool_lock:
        pool, _process_pool = _process_pool, None
    if pool is not None:
        pool.close()


def init(*, address=None, token=None, team=None, node=None, local_only=None, log_to_driver=None,
         worker_linger_ms=None, driver=None, simulate=None, nodes=None, config=None, config_text=None,
         clock_speed=None, cpu_workers=None, lease_linger_ms=None):
    """Start gpupool in this process: joined to a shared pool (`address`), or an embedded pool over
    this machine's GPUs (simulated when it has none). Unset arguments come from the environment
    (GPUPOOL_ADDRESS, GPUPOOL_TOKEN, GPUPOOL_TEAM, GPUPOOL_NODE, GPUPOOL_LOCAL_ONLY,
    GPUPOOL_WORKER_LINGER_MS, GPUPOOL_CONFIG, GPUPOOL_SIMULATE, GPUPOOL_NODES, GPUPOOL_DRIVER,
    GPUPOOL_CLOCK_SPEED), then the defaults.

    address: "HOST:PORT" of a `gpupool head`; token: the team's token there; node: the pool's name
    for this machine (default: the host name). Tasks then run wherever the pool places them: on
    another node, in a worker process of this job that the node's agent starts (this interpreter
    running `gpupool.worker` with this process's sys.path; functions and arguments travel by
    cloudpickle, so functions defined in __main__ work). local_only=True keeps every task on this
    node. log_to_driver=False silences the workers' output (otherwise printed here, each line
    prefixed "(<job> <node> pid=<pid>)"). worker_linger_ms: how long an idle worker stays.

    simulate: GPUs of each simulated node, e.g. "4xH100-80GB"; nodes: how many such nodes.
    config / config_text: a YAML pool configuration (teams, quotas, priority classes), as a path or
    inline. team: the team of tasks that name none. clock_speed: pool seconds per real second.
    Returns the pool's notice (e.g. that it is simulated) or "". Calling submit() or put() first
    initialises with the defaults, as Ray does.
    """
    with _init_lock:
        return _core._init(driver=driver, simulate=simulate, nodes=nodes, config=config,
                           config_text=config_text, team=team, clock_speed=clock_speed,
                           cpu_workers=cpu_workers, lease_linger_ms=lease_linger_ms,
                           address=address, token=token, node=node, local_only=local_only,
                           log_to_driver=log_to_driver, worker_linger_ms=worker_linger_ms,
                           **_worker_command())


def _worker_command():
    """How a worker of this driver starts on another node: this interpreter, with this process's
    module search path."""
    from ._process_pool import module_search_path
    return {"worker_python": sys.executable, "worker_path": module_search_path()}


def shutdown():
    """Stop the runtime: pending tasks fail with CANCELLED, running ones finish, leases go back."""
    with _init_lock:
        _core._shutdown()
    _close_process_pool()


def is_initialized():
    return _core._initialized()


atexit.register(shutdown)


def _refuse_in_process_worker():
    if _in_process_worker:
        raise GpupoolError("a process=True task cannot submit tasks or put objects: it runs in a worker "
                           "process with no runtime of its own; return values to the driver instead")


def _ensure_initialized():
    _refuse_in_process_worker()
    with _init_lock:
        if not _core._initialized():
            _core._init(**_worker_command())   # environment, then defaults


def _with_runtime(call, *args):
    _refuse_in_process_worker()
    try:
        return call(*args)
    except GpupoolError as e:
        if getattr(e, "code", "") != "FAILED_PRECONDITION" or _core._initialized():
            raise
    _ensure_initialized()
    return call(*args)


# The task options' keywords, from the one C++ declaration of them (gpupool/task_option_list.h):
# {keyword: (default, doc)}. A keyword given as None takes the default.
_TASK_OPTIONS = _core._TASK_OPTIONS


def _make_options(settings):
    unknown = set(settings) - set(_TASK_OPTIONS)
    if unknown:
        raise TypeError("unknown task option(s) %s; known: %s"
                        % (", ".join(sorted(unknown)), ", ".join(_TASK_OPTIONS)))
    return _core._make_options(**settings)


class RemoteFunction:
    """A function that runs as a gpupool task: `f.submit(*args, **kwargs)` returns an ObjectRef.

    ObjectRef arguments (top level, positional or keyword) are dependencies: the task starts when
    they exist and receives their values. `f.options(gpus=..., ...)` returns a copy with other
    options. Calling `f(...)` directly runs it here, as a plain function.
    """

    def __init__(self, fn, settings):
        self._fn = fn
        self._key = "%s.%s" % (fn.__module__, fn.__qualname__)
        self._settings = dict(settings)
        self._settings.setdefault("name", fn.__qualname__)
        options = dict(self._settings)
        self._process = bool(options.pop("process", False))
        self._options = _make_options(options)
        if self._process:
            if options.get("gpus"):
                raise ValueError("process=True is for CPU tasks (gpus=0): GPU tasks placed on other nodes "
                                 "already run in worker processes, one per job and node")
            # Its own key: the same function without process=True keeps running in-process.
            self._key += "#process"
            self._process_function = None   # (id, cloudpickled function), made on first use
            _core._register(self._key, self._call_in_process)
        else:
            _core._register(self._key, fn)
        functools.update_wrapper(self, fn)

    def _call_in_process(self, *args, **kwargs):
        """Runs on the runtime's CPU thread: hands the call to a worker process and waits (the
        interpreter lock is free meanwhile). A worker that dies mid-task is replaced and the call
        made again, up to max_retries times, as a lost lease's task is."""
        from ._process_pool import WorkerDied
        if self._process_function is None:
            self._process_function = (next(_process_function_ids), _pickle_function(self._fn, self._key))
        function_id, blob = self._process_function
        retries = self._settings.get("max_retries")
        if retries is None:
            retries = _TASK_OPTIONS["max_retries"][0]   # the runtime's default, as for leases
        for attempt in range(retries + 1):
            try:
                return _process_pool_instance().run(function_id, blob, args, kwargs)
            except WorkerDied as e:
                if attempt == retries:
                    raise GpupoolError("%s (%d retries used up)" % (e, retries)) from None

    def submit(self, *args, **kwargs):
        return _with_runtime(self._submit, args, kwargs)

    def _submit(self, args, kwargs):
        return _core._submit(self._key, args, kwargs, self._options, self._exported())

    def _exported(self):
        """The function's export for workers on other nodes (None when the runtime has none):
        pickled at the first submit, as Ray does, so globals defined after the decorator travel.
        In a worker, a GPU task's function is exported too: its driver submits it, and it may run
        in another worker."""
        if self._process:
            return None
        if not _core._uses_workers() and not (_core._in_worker() and self._settings.get("gpus")):
            return None
        # Kept per function, not per RemoteFunction: f.options(...) makes a copy per call, and all
        # of them share one export per runtime.
        generation = _core._runtime_generation()
        export = _exports.get(self._fn)
        if export is None or export[0] != generation:
            export = (generation, _core._export(_pickle_function(self._fn, self._key)))
            _exports[self._fn] = export
        return export[1]

    def __reduce__(self):
        # A remote function inside a pickled function (one task calling another) is rebuilt, and
        # registered, where it is unpickled.
        return (RemoteFunction, (self._fn, self._settings))

    # Ray's spelling, for code moving over.
    remote = submit

    def options(self, **settings):
        merged = dict(self._settings)
        merged.update(settings)
        return RemoteFunction(self._fn, merged)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


def remote(fn=None, **settings):
    """Make a function a gpupool task, with or without options:

        @gpupool.remote
        def square(x): ...

        @gpupool.remote(gpus=0.25, gpu_memory_mib=8192, team="search")
        def score(batch): ...

    Options: gpus (0 = CPU, a fraction below 1 = a share of one GPU, n = n whole GPUs on one node),
    gpu_memory_mib, models (catalogue names), labels / avoid_labels (dicts), isolation (MIG or
    whole GPUs only), team, project, workload_class, priority_class, max_retries, name; and
    process=True: a CPU task that runs in a worker process of this node (one per core at most),
    so pure-Python CPU-bound tasks scale with cores instead of taking turns on the interpreter
    lock. Such a task has no gpupool.context(), cannot read ObjectRefs nested inside its
    arguments (top-level ones arrive as values) and submits no tasks itself.
    Decorate at module level: tasks find their function by module and qualified name.
    """
    if fn is None:
        return lambda f: RemoteFunction(f, settings)
    if settings:
        raise TypeError("use @gpupool.remote(option=...) with keyword options only")
    return RemoteFunction(fn, {})


class _Unpicklable:
    """Stands in for a function that could not be pickled: the task fails in the worker, saying
    why, instead of the submit failing for tasks that may well run here."""

    def __init__(self, key, reason):
        self.key, self.reason = key, reason

    def __call__(self, *args, **kwargs):
        raise GpupoolError("the function %s could not be sent to a worker process: %s"
                           % (self.key, self.reason))


def _pickle_function(fn, key):
    try:
        import cloudpickle
    except ImportError:
        cloudpickle = None
    try:
        if cloudpickle is not None:
            return cloudpickle.dumps(fn, protocol=5)
        if fn.__module__ == "__main__":
            raise TypeError("functions defined in __main__ need cloudpickle (pip install cloudpickle)")
        return pickle.dumps(fn, protocol=5)
    except Exception as e:  # noqa: BLE001 - whatever pickling raised is the reason to report
        return pickle.dumps(_Unpicklable(key, "%s: %s" % (type(e).__name__, e)), protocol=5)


def _ref_from_id(object_id):
    """How a pickled ObjectRef comes back (ObjectRef.__reduce__ names this function)."""
    if _in_process_worker:
        raise GpupoolError("an ObjectRef inside an argument cannot be read in a process=True task's worker "
                           "process; pass it as a top-level argument (the task then receives its value)")
    if _core._in_worker():
        # This worker's own object, or one that came through the driver: its value is fetched
        # from the driver when it is read.
        return _core._import_from_driver(object_id)
    return _core._ref_from_id(object_id)


def _as_cause_type(error):
    """A TaskError whose task raised a picklable exception becomes an instance of both TaskError
    and the original exception's class, so `except ValueError:` catches it, as with Ray."""
    import pickle
    cause = None
    if getattr(error, "cause", b""):
        try:
            cause = pickle.loads(error.cause)
        except Exception:  # the class may not exist here; the message still has everything
            cause = None
    error.cause = cause
    if cause is None or isinstance(cause, TaskError):
        return error
    cause_type = type(cause)
    try:
        both = type("TaskError(%s)" % cause_type.__name__, (TaskError, cause_type), {})
        combined = both.__new__(both)
        combined.args = error.args
        combined.__dict__.update(error.__dict__)
        combined.__dict__.update(getattr(cause, "__dict__", {}))
        combined.cause = cause
        return combined
    except TypeError:  # incompatible layouts (some built-in exceptions): keep the plain TaskError
        return error


def get(refs, *, timeout=None):
    """The value of an ObjectRef (waiting for it), or a list of values for a list of refs.

    A task that failed raises TaskError (also an instance of the task's own exception type when it
    could travel); timeout (seconds) raises GpupoolError with code DEADLINE_EXCEEDED.
    """
    try:
        if isinstance(refs, ObjectRef):
            return _core._get(refs, timeout)
        if isinstance(refs, (list, tuple)):
            if timeout is None:
                return [_core._get(r, None) for r in refs]
            import time
            deadline = time.monotonic() + timeout
            return [_core._get(r, max(0.0, deadline - time.monotonic())) for r in refs]
    except TaskError as e:
        raise _as_cause_type(e) from None
    raise TypeError("get takes an ObjectRef or a list of them, not %s" % type(refs).__name__)


def wait(refs, *, num_returns=1, timeout=None):
    """Return (ready, not_ready) once num_returns of the refs are ready (or failed), or at the
    timeout, as Ray's wait. Order is kept within each list."""
    refs = list(refs)
    if not 0 <= num_returns <= len(refs):
        raise ValueError("num_returns must be between 0 and %d, got %d" % (len(refs), num_returns))
    flags = _core._wait(refs, num_returns, timeout)
    ready = [r for r, f in zip(refs, flags) if f]
    not_ready = [r for r, f in zip(refs, flags) if not f]
    return ready, not_ready


def put(value):
    """Store a value (pickled once) and return its ObjectRef."""
    return _with_runtime(_core._put, value)


def cancel(ref):
    """Drop a pending task (its result fails with CANCELLED) or flag a running one
    (context().cancelled, and context().step() raises)."""
    _core._cancel(ref)


def context():
    """The running task's TaskContext (slots, memory budget, cancellation, step()), or None outside
    a task."""
    return _core._context()


def rank():
    """(rank, ranks, node) of this process: under mpirun its rank, the number of ranks and the node
    its tasks run on; (0, 1, "") when the pool is embedded in this process."""
    _ensure_initialized()
    return _core._rank()


def stats():
    """Pool time, GPUs, per-team usage (GPU-hours leased/borrowed/busy, tasks), live objects."""
    return _core._stats()
