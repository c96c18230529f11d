"""`@gpupool.remote(process=True)`: CPU tasks in worker processes of the driver's node, each
driver run in its own interpreter (as a user runs a script: no main guard, functions in
__main__)."""
import subprocess
import sys
import textwrap


def run(body, timeout=60):
    return subprocess.run([sys.executable, "-c", "import gpupool\n" + textwrap.dedent(body)], capture_output=True,
                          text=True, timeout=timeout)


def test_process_tasks_run_in_worker_processes_and_the_script_runs_once():
    out = run("""
        import os
        print("the driver's top level ran")

        @gpupool.remote(process=True)
        def square(x):
            print("in a worker", flush=True)
            return x * x, os.getpid()

        @gpupool.remote(process=True)
        def add(a, b):
            return a + b

        results = gpupool.get([square.submit(i) for i in range(20)])
        print("squares", [v for v, _ in results] == [i * i for i in range(20)])
        pids = {p for _, p in results}
        print("in the driver", os.getpid() in pids, "processes", len(pids) <= len(os.sched_getaffinity(0)))
        first = square.submit(3)
        print("refs", gpupool.get(add.submit(gpupool.put(1), b=gpupool.get(first)[0])))
        print("plain call", square(2)[1] == os.getpid())
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    # The workers do not import the driver's __main__, so its top level ran once.
    assert lines.count("the driver's top level ran") == 1, out.stdout
    assert "squares True" in lines and "in the driver False processes True" in lines, out.stdout
    assert "refs 10" in lines and "plain call True" in lines, out.stdout
    # What a task prints reaches the driver's output.
    assert "in a worker" in lines, out.stdout


def test_failures_in_a_process_task_say_what_and_where():
    out = run("""
        import os, signal, time

        @gpupool.remote(process=True)
        def raises(x):
            raise KeyError("no such key %d" % x)

        @gpupool.remote(process=True, max_retries=1)
        def dies_once(marker):
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return "second try"

        @gpupool.remote(process=True)
        def always_dies():
            os.kill(os.getpid(), signal.SIGKILL)

        @gpupool.remote(process=True)
        def reads_nested(values):
            return values[0]   # a ref nested in the list fails as the arguments are read

        try:
            gpupool.get(raises.submit(7))
        except KeyError as e:
            print("KeyError:", "no such key 7" in str(e), "worker traceback:", "in raises" in str(e))
        import tempfile
        marker = os.path.join(tempfile.mkdtemp(), "once")
        print("retried:", gpupool.get(dies_once.submit(marker)))
        try:
            gpupool.get(always_dies.submit())
        except gpupool.TaskError as e:
            print("died:", str(e).splitlines()[0])
        try:
            gpupool.get(reads_nested.submit([gpupool.put(1)]))
        except gpupool.TaskError as e:
            print("nested:", str(e).splitlines()[0])
        # The failed call above left the worker able to run the function (it was loaded first).
        print("after:", gpupool.get(reads_nested.submit([5])))

        @gpupool.remote(process=True)
        def submits():
            return gpupool.put(1)
        try:
            gpupool.get(submits.submit())
        except gpupool.TaskError as e:
            print("submits:", str(e).splitlines()[0])
        try:
            gpupool.remote(process=True, gpus=1)(lambda: 0)
        except ValueError as e:
            print("gpu:", e)
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "KeyError: True worker traceback: True" in text, text
    assert "retried: second try" in text, text
    # Retried as often as the runtime's default max_retries (3), then failed naming the death.
    assert "died:" in text and "was killed by signal 9" in text and "3 retries used up" in text, text
    assert "nested:" in text and "pass it as a top-level argument" in text, text
    assert "gpu: process=True is for CPU tasks" in text, text
    assert "after: 5" in text, text
    assert "submits:" in text and "cannot submit tasks or put objects" in text, text
