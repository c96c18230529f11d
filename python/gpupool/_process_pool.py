"""Worker processes on this node for `@gpupool.remote(process=True)` tasks.

Python tasks of one process share the interpreter lock, so pure-Python CPU-bound tasks do not
scale with cores in-process. A process task still runs as a CPU task of the runtime (its
dependencies, retries, results and stats are the runtime's), but its runtime thread only hands the
call to an idle worker process here and waits without the lock; the worker runs the function.
There are at most as many workers as this process may use cores (the runtime's CPU threads are
as many), started on first use and kept until shutdown.

A worker is `python -m gpupool._process_pool FD`: this interpreter with this process's sys.path,
talking over a socket pair (its stdout and stderr are the driver's, so what a task prints shows
here). It does not import the driver's __main__ (multiprocessing's spawn would run a script
without a main guard again): functions travel by cloudpickle, once per function and worker.
Messages are length-prefixed pickles.
"""

import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import traceback

_HEADER = struct.Struct("<Q")


def _dumps(obj):
    try:
        import cloudpickle
        return cloudpickle.dumps(obj, protocol=5)
    except ImportError:
        return pickle.dumps(obj, protocol=5)


def _send(sock, payload):
    sock.sendall(_HEADER.pack(len(payload)) + payload)


def _recv_exactly(sock, n):
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(sock):
    header = _recv_exactly(sock, _HEADER.size)
    if header is None:
        return None
    return _recv_exactly(sock, _HEADER.unpack(header)[0])


def module_search_path():
    """This process's sys.path as PYTHONPATH for a child interpreter of it (a worker here, or one
    a node's agent starts): relative entries made absolute, since the child may start elsewhere."""
    return os.pathsep.join(os.path.abspath(p) if p else os.getcwd() for p in sys.path)


class WorkerDied(Exception):
    pass


class _Worker:
    def __init__(self):
        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=module_search_path(), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "gpupool._process_pool", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.known = set()   # function ids this worker has unpickled

    def call(self, function_id, function_blob, arguments):
        """(True, value) or (False, exception); raises WorkerDied when the process went away.
        The function and the (pickled) arguments are separate pickles, so arguments that cannot
        be read there never leave the function unloaded while this side believes it is."""
        blob = None if function_id in self.known else function_blob
        try:
            _send(self.sock, pickle.dumps((function_id, blob, arguments), protocol=5))
            reply = _recv(self.sock)
        except OSError:
            reply = None
        if reply is None:
            self.sock.close()
            code = self.proc.wait()
            how = "was killed by signal %d" % -code if code < 0 else "exited with status %d" % code
            raise WorkerDied("the worker process (pid %d) running the task %s" % (self.proc.pid, how))
        ok, value, loaded = pickle.loads(reply)
        if loaded:
            self.known.add(function_id)
        return ok, value

    def close(self):
        self.sock.close()   # the worker sees the end and exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ProcessPool:
    """Idle workers, started on demand up to `size`."""

    def __init__(self, size):
        self._size = size
        self._idle = []
        self._started = 0
        self._closed = False
        self._cv = threading.Condition()

    def run(self, function_id, function_blob, args, kwargs):
        arguments = _dumps((args, kwargs))   # an argument that cannot be pickled fails here
        worker = self._take()
        try:
            ok, value = worker.call(function_id, function_blob, arguments)
        except WorkerDied:
            with self._cv:
                self._started -= 1
                self._cv.notify()
            raise
        except BaseException:
            # The conversation is in an unknown state: this worker is not reused.
            worker.close()
            with self._cv:
                self._started -= 1
                self._cv.notify()
            raise
        self._give_back(worker)
        if ok:
            return value
        raise value

    def _take(self):
        with self._cv:
            while True:
                if self._closed:
                    raise RuntimeError("gpupool is shutting down")
                if self._idle:
                    return self._idle.pop()
                if self._started < self._size:
                    self._started += 1
                    break
                self._cv.wait()
        try:
            return _Worker()
        except BaseException:
            with self._cv:
                self._started -= 1
                self._cv.notify()
            raise

    def _give_back(self, worker):
        with self._cv:
            closed = self._closed
            if not closed:
                self._idle.append(worker)
                self._cv.notify()
        if closed:
            worker.close()   # may wait for the process: outside the lock

    def close(self):
        with self._cv:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cv.notify_all()
        for w in idle:
            w.close()


def _serve(fd):
    """The worker's loop: run each call, reply with its value or its exception."""
    from . import _tasks
    _tasks._in_process_worker = True
    sock = socket.socket(fileno=fd)
    functions = {}
    while True:
        message = _recv(sock)
        if message is None:
            return
        function_id, blob, arguments = pickle.loads(message)
        try:
            if blob is not None:
                functions[function_id] = pickle.loads(blob)
            args, kwargs = pickle.loads(arguments)
            payload = _dumps((True, functions[function_id](*args, **kwargs), True))
        except Exception as e:  # noqa: BLE001 - the task's failure, whatever it is, goes back
            text = traceback.format_exc()
            try:
                if hasattr(e, "add_note"):  # Python 3.11: shown with the exception's message
                    e.add_note("Traceback in the worker process (most recent call last):\n"
                               + text.split("\n", 1)[1])
                payload = _dumps((False, e, function_id in functions))
            except Exception:  # noqa: BLE001 - an exception that cannot travel becomes its text
                payload = _dumps((False, RuntimeError(text), function_id in functions))
        _send(sock, payload)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
