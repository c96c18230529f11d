"""Python tasks anywhere in a shared pool, with real processes on loopback: a `gpupool head` over
two nodes of two simulated GPUs, an agent per node, and Python drivers (their own processes) on
node-0 that join with gpupool.init(address=...). Tasks placed on node-1 run in a worker process
that node-1's agent starts (`python -m gpupool.worker`); the drivers' functions are defined in
__main__, so they reach the worker by cloudpickle, as in Ray. (The pool: conftest.py.)"""
import os
import subprocess
import sys
import textwrap
import time

from conftest import TEAM_TOKEN

def run_driver(port, body, timeout=60, **init):
    """Runs `body` as a driver's __main__ after gpupool.init(address=..., node="node-0", **init)."""
    settings = dict(address=f"127.0.0.1:{port}", token=TEAM_TOKEN, node="node-0")
    settings.update(init)
    script = "import gpupool\n" + textwrap.dedent(body).replace("INIT()", f"gpupool.init(**{settings!r})")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def workers_of(job):
    """Pids of processes whose command line names this job as a worker's."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"--gpupool-worker-job={job}".encode() in cmdline:
            found.append(int(pid))
    return found


def test_tasks_defined_in_main_run_at_once_on_both_nodes_and_no_worker_outlives_the_driver(two_node_pool):
    out = run_driver(two_node_pool, """
        import os, time
        @gpupool.remote(gpus=1)
        def work(i):
            node = gpupool.context().slots[0]["node"]
            print("task", i, "running on", node, flush=True)
            start = time.time()
            time.sleep(1.0)
            return node, os.getpid(), start, time.time()
        INIT()
        results = gpupool.get([work.submit(i) for i in range(4)])
        # At once: every task started before any ended (one host, so one clock).
        print("overlap", max(r[2] for r in results) < min(r[3] for r in results))
        print("nodes", sorted(r[0] for r in results))
        print("driver", os.getpid(), "worker pids", sorted({r[1] for r in results if r[0] == "node-1"}))
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    # Four 1-s tasks on four GPUs ran at once (not two at a time).
    assert "overlap True" in lines, out.stdout
    # Two on the driver's own node (preferred among equal placements), two in node-1's worker.
    assert "nodes ['node-0', 'node-0', 'node-1', 'node-1']" in lines, out.stdout
    driver_line = next(l for l in lines if l.startswith("driver"))
    driver_pid = int(driver_line.split()[1])
    assert f"worker pids [{driver_pid}]" not in driver_line, "node-1's tasks ran in the driver"
    # The worker's own output reached the driver, prefixed with the job, node and pid.
    prefixed = [l for l in lines if l.startswith("(job-") and " node-1 pid=" in l]
    assert any("running on node-1" in l for l in prefixed), out.stdout
    job = prefixed[0].split()[0].lstrip("(")
    # The driver has gone: within 2 s so has every worker of its job.
    deadline = time.monotonic() + 2
    while workers_of(job) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workers_of(job) == [], f"a worker of {job} outlived its driver"


def test_what_fails_in_a_worker_fails_the_task_once_saying_why(two_node_pool):
    out = run_driver(two_node_pool, """
        import threading, time
        INIT()
        lock = threading.Lock()
        ON_NODE_1 = dict(gpus=1, labels={"node": "node-1"})

        @gpupool.remote(**ON_NODE_1)
        def holds_a_lock(i):
            with lock:
                return i

        @gpupool.remote(**ON_NODE_1, max_retries=3)
        def raises(i):
            raise ValueError("bad value %d" % i)

        @gpupool.remote(**ON_NODE_1)
        def add(a, b=0):
            return a + b

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def reads_nested(refs):
            return [gpupool.get(r) for r in refs]

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def passes_back(refs):
            return refs

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def returns_its_own_ref():
            return [gpupool.put(5), gpupool.put({"nested": gpupool.put(9)})]

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def big_result():
            return b"x" * (1 << 20)

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def reads_on_node_0(refs):
            return sum(len(gpupool.get(r)) if isinstance(gpupool.get(r), bytes) else gpupool.get(r) for r in refs)

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def sends_its_own_ref_to_itself():
            # A worker is a group of one: a ref it sends itself stays in the process.
            ctx = gpupool.context()
            six = gpupool.put(6)  # kept: a group of one holds no object for its receiver
            ctx.send([six], 0, tag=3)
            return gpupool.get(ctx.recv(0, tag=3)[0])

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def slow_value():
            import time
            time.sleep(0.5)
            return 2

        try:
            gpupool.get(holds_a_lock.submit(1))
        except gpupool.TaskError as e:
            print("unpicklable:", str(e).splitlines()[0])
        try:
            gpupool.get(raises.submit(2))
        except ValueError as e:
            print("ValueError, attempts:", "attempt 1" in str(e), "on node-1:", "node-1" in str(e))
        forty = gpupool.put(40)
        print("sum", gpupool.get(add.submit(forty, b=add.submit(1, 1))))
        # Refs nested inside an argument are imported from the driver by the worker, one of them
        # still being computed when the task is submitted (it is sent once that one is ready).
        print("nested", gpupool.get(reads_nested.submit([forty, slow_value.submit()]), timeout=20))
        # Refs a worker received and returns unread are the driver's own objects again.
        back = gpupool.get(passes_back.submit([forty, slow_value.submit()]), timeout=20)
        print("passed back", [gpupool.get(r) for r in back])
        # Objects a worker made reach the driver: the worker keeps them until the driver reads
        # them (a ref nested in one of them too).
        own = gpupool.get(returns_its_own_ref.submit(), timeout=20)
        print("own refs kept by the worker", gpupool.stats()["objects_kept_by_workers"] >= 2)
        print("own refs", gpupool.get(own[0]), gpupool.get(gpupool.get(own[1])["nested"]))
        # A result over 100 KiB stays in the worker until something needs it.
        big = big_result.submit()
        deadline = time.time() + 20
        while gpupool.stats()["objects_kept_by_workers"] == 0 and time.time() < deadline:
            time.sleep(0.02)
        print("big kept by the worker", gpupool.stats()["objects_kept_by_workers"] >= 1)
        print("big", len(gpupool.get(big, timeout=20)), gpupool.stats()["bytes_fetched_from_workers"] >= (1 << 20))
        # A task elsewhere (node-0: the driver's own process) reads them, nested in its argument.
        print("read on node-0", gpupool.get(reads_on_node_0.submit([big_result.submit(), own[0]]), timeout=20))
        print("sent to itself", gpupool.get(sends_its_own_ref_to_itself.submit(), timeout=20))
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "unpicklable:" in text and "could not be sent to a worker process" in text \
        and "cannot pickle '_thread.lock'" in text, text
    # An exception of the task's own raises once, as its own type, naming the node: no retries.
    assert "ValueError, attempts: True on node-1: True" in text, text
    # Top-level refs (a put value, another task's result) travel with the task.
    assert "sum 42" in text, text
    assert "nested [40, 2]" in text, text
    assert "passed back [40, 2]" in text, text
    # Objects a worker made reach the driver, fetched when read; a big result likewise.
    assert "own refs kept by the worker True" in text, text
    assert "own refs 5 9" in text, text
    assert "big kept by the worker True" in text, text
    assert "big 1048576 True" in text, text
    assert "read on node-0 1048581" in text, text
    assert "sent to itself 6" in text, text


def test_a_job_shuts_down_promptly_with_a_workers_task_that_reaches_no_safe_point(two_node_pool, tmp_path):
    # A 60-s task runs in node-1's worker, and another waits for its result, nested in its
    # argument (a task is sent to a worker once its nested refs are ready: the worker imports them
    # before it starts). The driver shuts down meanwhile: it gives the worker's task 2 s to reach
    # a safe point, then gives up on it, and the whole job is gone within seconds, not a minute.
    marker = tmp_path / "slow-started"
    start = time.monotonic()
    out = run_driver(two_node_pool, f"""
        import os, time
        INIT()

        @gpupool.remote(gpus=0.25, labels={{"node": "node-1"}})
        def very_slow():
            print("slow task in", os.getpid(), flush=True)  # reaches the driver prefixed with the job
            open({str(marker)!r}, "w").close()
            time.sleep(60)
            return 1

        @gpupool.remote(gpus=0.5, labels={{"node": "node-1"}})
        def reads_nested(refs):
            return [gpupool.get(r) for r in refs]

        pending = reads_nested.submit([very_slow.submit()])
        deadline = time.time() + 30
        while not os.path.exists({str(marker)!r}) and time.time() < deadline:
            time.sleep(0.05)
        print("slow task started", os.path.exists({str(marker)!r}), flush=True)
        t = time.time()
        gpupool.shutdown()
        print("shut down in %.1f s" % (time.time() - t), flush=True)
    """, timeout=90)
    took = time.monotonic() - start
    assert out.returncode == 0, out.stdout + out.stderr
    assert "slow task started True" in out.stdout, out.stdout + out.stderr
    shutdown_s = float(out.stdout.split("shut down in ")[1].split()[0])
    assert shutdown_s < 20, f"shutdown took {shutdown_s} s with a worker's task running"
    # The worker's line may not have been forwarded before the driver stopped; when it was, its
    # job's workers are checked in the process table.
    job = next((l for l in out.stdout.splitlines() if l.startswith("(job-")), None)
    if job is not None:
        job = job.split()[0].lstrip("(")
        deadline = time.monotonic() + 5
        while workers_of(job) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers_of(job) == [], f"a worker of {job} outlived its driver"
    assert took < 60, f"the driver took {took:.1f} s"


def test_a_worker_killed_mid_task_runs_it_again_in_a_fresh_worker(two_node_pool, tmp_path):
    out = run_driver(two_node_pool, f"""
        import os, signal, time
        INIT()

        @gpupool.remote(gpus=1, labels={{"node": "node-1"}}, max_retries=2)
        def victim(marker):
            attempt = gpupool.context().attempt
            with open(marker + ".%d" % attempt, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(1.0)
            return attempt, os.getpid()

        marker = {str(tmp_path / "marker")!r}
        ref = victim.submit(marker)
        while not os.path.exists(marker + ".0"):
            time.sleep(0.02)
        time.sleep(0.1)
        first = int(open(marker + ".0").read())
        os.kill(first, signal.SIGKILL)
        killed = time.monotonic()
        attempt, pid = gpupool.get(ref, timeout=30)
        print("again after %.2f s" % (time.monotonic() - killed), "attempt", attempt, "fresh", pid != first)
        print("preemptions", sum(t["preemptions"] for t in gpupool.stats()["teams"]))
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("again"))
    assert line.endswith("attempt 1 fresh True"), out.stdout
    # The rerun is a 1-s task: it started within a few seconds of the kill.
    assert float(line.split()[2]) < 4, out.stdout


def test_local_only_keeps_tasks_home_and_log_to_driver_false_silences_workers(two_node_pool):
    home = run_driver(two_node_pool, """
        @gpupool.remote(gpus=1, labels={"node": "node-1"})
        def elsewhere():
            return 1
        INIT()
        try:
            gpupool.get(elsewhere.submit())
        except gpupool.GpupoolError as e:
            print("refused:", e)
    """, local_only=True)
    assert home.returncode == 0, home.stdout + home.stderr
    assert "refused:" in home.stdout and "this process runs on node 'node-0'" in home.stdout, home.stdout

    quiet = run_driver(two_node_pool, """
        @gpupool.remote(gpus=1, labels={"node": "node-1"})
        def chatty():
            print("a line from the worker", flush=True)
            return gpupool.context().slots[0]["node"]
        INIT()
        print("ran on", gpupool.get(chatty.submit()))
    """, log_to_driver=False)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "ran on node-1" in quiet.stdout
    assert "a line from the worker" not in quiet.stdout + quiet.stderr


def test_the_sweep_example_fans_out_over_both_nodes(two_node_pool):
    """examples/python/sweep.py as its docstring runs it: the trials go to both nodes, and the
    best one is the line the data was drawn from."""
    example = os.path.join(os.environ["GPUPOOL_SOURCE_DIR"], "examples", "python", "sweep.py")
    env = dict(os.environ, GPUPOOL_ADDRESS=f"127.0.0.1:{two_node_pool}", GPUPOOL_TOKEN=TEAM_TOKEN,
               GPUPOOL_NODE="node-0")
    out = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "best: learning rate 0.1, 200 steps: y = 3.00 x + 1.99" in out.stdout, out.stdout
    assert "8 trials on node-0, node-1 in" in out.stdout, out.stdout


def test_a_node_where_the_job_has_a_worker_is_preferred_among_equals(two_node_pool):
    """A driver off the pool (node-7) runs every task in workers. Once it has a worker on a node,
    a task that could go to either empty node goes there (no second worker to start); checked
    with the worker on each node in turn, so the pool's own tie order cannot pass it by chance."""
    for first in ("node-0", "node-1"):
        out = run_driver(two_node_pool, f"""
            import os, time
            @gpupool.remote(gpus=1)
            def where():
                return gpupool.context().slots[0]["node"], os.getpid()
            INIT()
            node, pid = gpupool.get(where.options(labels={{"node": {first!r}}}).submit())
            time.sleep(0.6)   # the lease lingers 200 ms and goes back; the worker stays (2 s)
            again, again_pid = gpupool.get(where.submit())
            print("first", node, "then", again, "same worker", pid == again_pid)
        """, node="node-7")
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"first {first} then {first} same worker True" in out.stdout, out.stdout


def test_a_worker_keeps_what_it_made_until_the_driver_lets_go_and_its_death_loses_it_by_name(two_node_pool):
    # A worker keeps the objects it made for the driver: past its linger it stays while the
    # driver holds a ref, and leaves once the driver dropped it. A worker killed with such an
    # object unread takes it along: reading it fails at once, naming the object and the worker.
    out = run_driver(two_node_pool, """
        import gc, os, signal, time
        INIT()

        def alive(pid):
            try:
                with open("/proc/%d/status" % pid) as f:
                    return not any(l.startswith("State:") and "Z" in l.split()[1] for l in f)
            except OSError:
                return False

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def made_here(value):
            return [gpupool.put(value), os.getpid()]

        ref, pid = gpupool.get(made_here.submit(1), timeout=20)
        time.sleep(1.5)  # five lingers
        print("kept past its linger", alive(pid))
        del ref
        gc.collect()
        deadline = time.time() + 10
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        print("left once dropped", not alive(pid))

        ref, pid = gpupool.get(made_here.submit(2), timeout=20)
        os.kill(pid, signal.SIGKILL)
        start = time.time()
        try:
            gpupool.get(ref, timeout=20)
            print("lost: read anyway")
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            print("lost:", type(e).__name__, "is lost: only worker pid %d on node node-1 kept it" % pid in str(e),
                  "%.1f s" % (time.time() - start))
        print("after", gpupool.get(made_here.submit(3), timeout=20)[1] != pid)

        # A big result kept by the worker, naming an object it made and one of the driver's that
        # nothing else holds: read later, both are still there.
        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def big_with_refs(refs):
            return [b"x" * (1 << 20), gpupool.put("made there"), refs[0], os.getpid()]

        mine = gpupool.put("the driver's")
        big = big_with_refs.submit([mine])
        del mine
        gc.collect()
        time.sleep(0.5)
        value = gpupool.get(big, timeout=20)
        print("big with refs", len(value[0]), gpupool.get(value[1], timeout=20), gpupool.get(value[2], timeout=20))

        # An object a worker made, read by the driver (the worker lets go of it), then passed back
        # to a task on that worker: the worker gets it from the driver.
        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def reads(refs):
            return gpupool.get(refs[0]), os.getpid()

        ref, maker = gpupool.get(made_here.submit(41), timeout=20)
        print("read here", gpupool.get(ref))
        print("passed back to its maker", gpupool.get(reads.submit([ref]), timeout=20) == (41, maker))

        # A big result dropped unread, with a ref to an object its worker made inside: the worker
        # lets go of both and lingers out.
        kept_before = gpupool.stats()["objects_kept_by_workers"]
        dropped = big_with_refs.submit([gpupool.put(0)])
        pid = gpupool.get(reads.submit([gpupool.put(0)]), timeout=20)[1]
        deadline = time.time() + 20  # done, not read (a wait would fetch it)
        while gpupool.stats()["objects_kept_by_workers"] == kept_before and time.time() < deadline:
            time.sleep(0.02)
        print("kept unread", gpupool.stats()["objects_kept_by_workers"] > kept_before)
        del dropped
        gc.collect()
        deadline = time.time() + 10
        while alive(pid) and time.time() < deadline:
            time.sleep(0.05)
        print("lingered out after an unread result", not alive(pid))
    """, worker_linger_ms=300)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "kept past its linger True" in text, text
    assert "left once dropped True" in text, text
    assert "lost: GpupoolError True" in text, text
    lost_s = float(text.split("lost: GpupoolError True ")[1].split()[0])
    assert lost_s < 10, text
    assert "after True" in text, text
    assert "big with refs 1048576 made there the driver's" in text, text
    assert "read here 41" in text, text
    assert "passed back to its maker True" in text, text
    assert "kept unread True" in text, text
    assert "lingered out after an unread result True" in text, text


def test_a_worker_fetches_the_drivers_objects_only_when_read_and_borrows_what_it_keeps(two_node_pool):
    # A ref nested in a task's argument travels as its id: the worker fetches the value only when
    # its task reads it. A ref the worker keeps past its task (here in a global) is borrowed: the
    # driver keeps the object while the worker holds it, so a later task can still return it
    # after the driver dropped its own ref.
    out = run_driver(two_node_pool, """
        import gc, time
        INIT()
        ON_NODE_1 = dict(gpus=0.5, labels={"node": "node-1"})

        @gpupool.remote(**ON_NODE_1)
        def ignores(refs):
            return len(refs)

        @gpupool.remote(**ON_NODE_1)
        def reads(refs):
            return len(gpupool.get(refs[0]))

        @gpupool.remote(**ON_NODE_1)
        def keeps(refs):
            import builtins
            builtins.kept_by_this_worker = refs[0]
            return 1

        @gpupool.remote(**ON_NODE_1)
        def gives_back():
            import builtins
            return [builtins.kept_by_this_worker]

        big = gpupool.put(b"y" * (1 << 20))
        before = gpupool.stats()["bytes_fetched_by_workers"]
        print("ignored", gpupool.get(ignores.submit([big]), timeout=20),
              gpupool.stats()["bytes_fetched_by_workers"] - before)
        print("read", gpupool.get(reads.submit([big]), timeout=20),
              gpupool.stats()["bytes_fetched_by_workers"] - before >= (1 << 20))
        kept = gpupool.put("kept by the worker")
        gpupool.get(keeps.submit([kept]), timeout=20)
        del kept
        gc.collect()
        time.sleep(0.3)
        back = gpupool.get(gives_back.submit(), timeout=20)
        print("given back:", gpupool.get(back[0], timeout=20))
    """)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    # Only the function's export (a few hundred bytes) travelled, not the 1 MiB it was given.
    ignored_bytes = int(text.split("ignored 1 ")[1].split()[0])
    assert ignored_bytes < (64 << 10), text
    assert "read 1048576 True" in text, text
    assert "given back: kept by the worker" in text, text


def test_one_workers_objects_reach_a_task_in_another_worker(two_node_pool):
    # A driver on no node of the pool: node-0's and node-1's tasks run in two workers. What
    # node-1's worker made (a value it put, a result over 100 KiB) is read by a task in node-0's
    # worker: it asks the driver, which fetches the value it put from node-1's worker meanwhile,
    # and says where the result is, for node-0's worker to fetch it from node-1's itself.
    out = run_driver(two_node_pool, """
        INIT()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def makes():
            return [gpupool.put(b"z" * 1000)]

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def big():
            return b"b" * (1 << 20)

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def reads(refs):
            import os
            return [len(gpupool.get(r)) for r in refs], os.getpid()

        made = gpupool.get(makes.submit(), timeout=20)
        sizes, pid = gpupool.get(reads.submit([made[0], big.submit()]), timeout=20)
        import os
        print("read in another worker", sizes, pid != os.getpid())
        fetched = gpupool.stats()["bytes_fetched_from_workers"]
        print("through the driver", 1000 <= fetched < (1 << 20))
    """, node="elsewhere")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "read in another worker [1000, 1048576] True" in out.stdout, out.stdout
    assert "through the driver True" in out.stdout, out.stdout


def test_a_tasks_input_that_a_worker_keeps_goes_from_that_worker_never_through_the_driver(two_node_pool):
    # A driver on no node of the pool. node-1's worker keeps two results over 100 KiB; a task
    # reading one as its argument on node-0 fetches it from node-1's worker over UCX, and one on
    # node-1 reads the other in place: the driver fetches none of their bytes. Then, with the driver
    # reading the same value at once (its fetch makes the keeper let go), each task still gets its
    # input: from the keeper, or from the driver when the keeper no longer has it.
    out = run_driver(two_node_pool, """
        import os
        INIT()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def big(n):
            return b"b" * n

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def size_on_node_0(data):
            import os
            return len(data), os.getpid()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def size_on_node_1(data):
            import os
            return len(data), os.getpid()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def pid():
            import os
            return os.getpid()

        a, b = big.submit(4 << 20), big.submit(2 << 20)
        n0, p0 = gpupool.get(size_on_node_0.submit(a), timeout=30)
        n1, p1 = gpupool.get(size_on_node_1.submit(b), timeout=30)
        keeper = gpupool.get(pid.submit(), timeout=30)
        print("sizes", n0, n1, "other worker", p0 not in (keeper, os.getpid()), "in place", p1 == keeper)
        print("through the driver", gpupool.stats()["bytes_fetched_from_workers"])
        ok = 0
        for i in range(6):
            x = big.submit((1 << 20) + i)
            reader = (size_on_node_0 if i % 2 == 0 else size_on_node_1).submit(x)
            ok += len(gpupool.get(x, timeout=30)) == (1 << 20) + i and gpupool.get(reader, timeout=30)[0] == (1 << 20) + i
        print("raced reads right", ok)
    """, node="elsewhere")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"sizes {4 << 20} {2 << 20} other worker True in place True" in out.stdout, out.stdout
    assert "through the driver 0" in out.stdout, out.stdout
    assert "raced reads right 6" in out.stdout, out.stdout


def test_a_kept_input_naming_objects_its_keeper_made_reaches_another_worker_through_the_driver(two_node_pool):
    # node-1's worker keeps a result over 100 KiB that holds a ref to an object it put. Another
    # worker could not resolve that ref from the bytes alone: the value goes through the driver
    # (which records the ref as it reads it), while node-1's own task still reads it in place.
    out = run_driver(two_node_pool, """
        INIT()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def big_with_ref():
            return [gpupool.put(b"p" * 10), b"y" * (200 << 10)]

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def reads_on_node_0(value):
            return len(gpupool.get(value[0])) + len(value[1])

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def reads_on_node_1(value):
            return len(gpupool.get(value[0])) + len(value[1])

        v = big_with_ref.submit()
        print("on node-1", gpupool.get(reads_on_node_1.submit(v), timeout=30))
        print("through the driver", gpupool.stats()["bytes_fetched_from_workers"])
        print("on node-0", gpupool.get(reads_on_node_0.submit(v), timeout=30))
        print("through the driver", gpupool.stats()["bytes_fetched_from_workers"] > (200 << 10))
    """, node="elsewhere")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"on node-1 {10 + (200 << 10)}\nthrough the driver 0\n" in out.stdout, out.stdout
    assert f"on node-0 {10 + (200 << 10)}\nthrough the driver True\n" in out.stdout, out.stdout


class _CuttableProxy:
    """A TCP relay on loopback to `port` whose live connections the test can cut (both ends
    closed), as a network blip between a driver and its head would; it keeps accepting."""

    def __init__(self, port):
        import socket
        import threading
        self._socket = socket
        self._target = int(port)
        self._lock = threading.Lock()
        self._pairs = []
        self.connections = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = self._socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                client.close()  # the head is not there: the driver sees the connection close
                continue
            with self._lock:
                self._pairs.append((client, upstream))
                self.connections += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # the other direction's pump ends too, and closes them again
            try:
                s.shutdown(self._socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self):
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(self._socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self._listener.close()
        self.cut()


def test_a_driver_that_loses_its_head_for_a_moment_keeps_its_workers_and_their_running_task(
        two_node_pool_with_journal, tmp_path):
    # The driver reaches its head through a relay, cut while its task runs in node-1's worker. The
    # head keeps the job's leases and workers for its reclaim window; the driver comes back, and
    # the task finishes in the worker it started in, on its first attempt (before, the head
    # stopped the job's workers as soon as the connection dropped, and the task ran again).
    import threading
    proxy = _CuttableProxy(two_node_pool_with_journal)
    marker = tmp_path / "started"

    cut_while_running = []

    def cut_once_started():
        for _ in range(3000):  # up to 60 s: a loaded machine starts workers slowly
            if marker.exists() and marker.read_text():
                time.sleep(0.3)
                proxy.cut()
                cut_while_running.append(True)
                return
            time.sleep(0.02)

    cutter = threading.Thread(target=cut_once_started)
    cutter.start()
    try:
        out = run_driver(two_node_pool_with_journal, f"""
            import os
            INIT()

            @gpupool.remote(gpus=1, labels={{"node": "node-1"}}, max_retries=2)
            def long_task(marker):
                import os, time
                with open(marker, "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(3)
                return gpupool.context().attempt, os.getpid()

            attempt, pid = gpupool.get(long_task.submit({str(marker)!r}), timeout=60)
            print("attempt", attempt, "same worker", pid == int(open({str(marker)!r}).read()))
        """, address=f"127.0.0.1:{proxy.port}")
    finally:
        cutter.join()
        proxy.close()
    assert out.returncode == 0, out.stdout + out.stderr + (tmp_path / "head.log").read_text()
    assert cut_while_running, "the task never started, so nothing was cut: " + out.stdout + out.stderr
    assert proxy.connections >= 2, "the driver did not come back through the relay: " + out.stderr
    assert "attempt 0 same worker True" in out.stdout, out.stdout + out.stderr + (tmp_path / "head.log").read_text()


def test_refs_nested_in_an_argument_to_values_a_worker_keeps_come_from_that_worker(two_node_pool):
    # Refs inside a list argument to results node-1's worker keeps: a task on node-0 reading them
    # is told by the driver where they are and fetches them from node-1's worker; one on node-1
    # reads them in place. The driver fetches none of their bytes until it reads them itself.
    out = run_driver(two_node_pool, """
        INIT()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def big(n):
            return b"n" * n

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def total_on_node_0(refs):
            return sum(len(gpupool.get(r)) for r in refs)

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def total_on_node_1(refs):
            return sum(len(gpupool.get(r)) for r in refs)

        refs = [big.submit(1 << 20), big.submit(2 << 20)]
        print("node-0", gpupool.get(total_on_node_0.submit(refs), timeout=30))
        print("node-1", gpupool.get(total_on_node_1.submit(refs), timeout=30))
        print("through the driver", gpupool.stats()["bytes_fetched_from_workers"])
        print("driver reads", sum(len(gpupool.get(r, timeout=30)) for r in refs))
    """, node="elsewhere")
    assert out.returncode == 0, out.stdout + out.stderr
    three = 3 << 20
    assert f"node-0 {three}\nnode-1 {three}\nthrough the driver 0\ndriver reads {three}\n" in out.stdout, out.stdout


def noting_runs(tmp_path):
    """Driver code that starts the runtime and defines note(tag): each run of a task writes its
    process id to <runs>/<tag>.<attempt>, so a test sees which tasks ran, how often and where."""
    return f"""
        import os, signal, time
        INIT()
        runs = {str(tmp_path / "runs")!r}
        os.makedirs(runs)

        def note(tag):
            with open(os.path.join(runs, "%s.%d" % (tag, gpupool.context().attempt)), "w") as f:
                f.write(str(os.getpid()))
    """


def test_results_a_killed_worker_kept_are_made_again_from_their_lineage(two_node_pool, tmp_path):
    # node-1's worker keeps two big results, the second computed from the first, and the driver
    # has read neither. Killed, it takes both along: each is made again (its task runs again,
    # counted as a retry; the second after the first), whoever waits for them keeps waiting, and
    # tasks submitted on them read the new values. A result whose task has no retry left is lost,
    # by name and saying why.
    out = run_driver(two_node_pool, noting_runs(tmp_path) + """
        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def first(n):
            note("first")
            return b"a" * n

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def second(data):
            note("second")
            return data + b"b" * 1000

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def size(data):
            return len(data)

        def kept(n):
            deadline = time.time() + 20  # done, not read (a wait would fetch it)
            while gpupool.stats()["objects_kept_by_workers"] < n and time.time() < deadline:
                time.sleep(0.02)
            return gpupool.stats()["objects_kept_by_workers"]

        a = first.submit(1 << 20)
        b = second.submit(a)
        print("kept", kept(2))
        keeper = int(open(os.path.join(runs, "first.0")).read())
        os.kill(keeper, signal.SIGKILL)
        killed = time.monotonic()
        print("second made again", len(gpupool.get(b, timeout=60)) == (1 << 20) + 1000,
              "after %.1f s" % (time.monotonic() - killed))
        print("read on node-0", gpupool.get(size.submit(a), timeout=60))
        print("first made again", gpupool.get(a, timeout=60) == b"a" * (1 << 20))
        print("runs", sorted(os.listdir(runs)))
        print("new worker", int(open(os.path.join(runs, "second.1")).read()) != keeper)
        print("objects rebuilt", gpupool.stats()["objects_rebuilt"])

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"}, max_retries=0)
        def once(n):
            note("once")
            return b"z" * n

        z = once.submit(1 << 20)
        kept(1)
        os.kill(int(open(os.path.join(runs, "once.0")).read()), signal.SIGKILL)
        try:
            gpupool.get(z, timeout=30)
            print("no retry: read anyway")
        except Exception as e:  # noqa: BLE001 - the message is what is checked
            print("no retry:", type(e).__name__, str(e))
    """, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "kept 2" in text, text
    assert "second made again True" in text, text
    assert f"read on node-0 {1 << 20}" in text, text
    assert "first made again True" in text, text
    assert "runs ['first.0', 'first.1', 'second.0', 'second.1']" in text, text
    assert "new worker True" in text, text
    assert "objects rebuilt 2" in text, text
    line = next(l for l in text.splitlines() if l.startswith("no retry:"))
    assert "GpupoolError" in line and "the result of task 'once'" in line, text
    assert "not made again" in line and "max_retries 0" in line, text


def test_a_task_whose_input_is_being_made_again_waits_for_it_without_holding_its_lease(two_node_pool, tmp_path):
    # A driver on no node of the pool; every task takes all of node-1 (both GPUs). node-1's worker
    # keeps `a`, runs `slow`, and has `c` (which reads `a`) queued behind it when it is killed. `a`
    # is made again, and `slow` and `c` run again, in a fresh worker. `c` must not take node-1
    # while `a` waits to be made there: it waits for `a` unleased, so all three finish.
    out = run_driver(two_node_pool, noting_runs(tmp_path) + """
        @gpupool.remote(gpus=2, labels={"node": "node-1"})
        def first(n):
            note("first")
            return b"a" * n

        @gpupool.remote(gpus=2, labels={"node": "node-1"})
        def slow():
            note("slow")
            time.sleep(1.5)
            return "slow done"

        @gpupool.remote(gpus=2, labels={"node": "node-1"})
        def size(data):
            note("size")
            return len(data)

        a = first.submit(1 << 20)
        deadline = time.time() + 20
        while gpupool.stats()["objects_kept_by_workers"] < 1 and time.time() < deadline:
            time.sleep(0.02)
        s = slow.submit()
        c = size.submit(a)
        while not os.path.exists(os.path.join(runs, "slow.0")) and time.time() < deadline:
            time.sleep(0.02)
        os.kill(int(open(os.path.join(runs, "first.0")).read()), signal.SIGKILL)
        print("slow", gpupool.get(s, timeout=40))
        print("size", gpupool.get(c, timeout=40))
        print("first again", os.path.exists(os.path.join(runs, "first.1")))
        print("objects rebuilt", gpupool.stats()["objects_rebuilt"])
    """, node="elsewhere", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "slow slow done" in text, text
    assert f"size {1 << 20}" in text, text
    assert "first again True" in text, text
    assert "objects rebuilt 1" in text, text


def test_a_task_in_a_worker_submits_gpu_tasks_that_run_anywhere_in_the_pool(two_node_pool):
    # A driver on no node of the pool. A task running in node-1's worker fans out GPU tasks (Ray's
    # nested tasks): the driver submits them as its own, so they run wherever the pool places them
    # (here node-0's worker) and the parent reads their results. Their arguments may be plain
    # values, a ref the driver made (passed down), objects the parent made with `put` (as an
    # argument, or nested in one). A child's result can go back to the driver as a ref; an object
    # the parent made that holds refs to others it made is refused, saying so.
    out = run_driver(two_node_pool, """
        import os
        INIT()

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def child(x, scale):
            return x * scale, os.getpid()

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def total(refs):
            return sum(gpupool.get(refs, timeout=20))

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def first_of(values):
            return gpupool.get(values[0], timeout=20)

        @gpupool.remote
        def slowly(x):  # a CPU task: it runs in the parent's worker, on its interpreter
            import time
            time.sleep(0.3)
            return x

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def parent(passed):
            from_driver = passed[0]  # a ref (top-level refs arrive as values)
            mine = gpupool.put(100)
            refs = [child.submit(i, 2) for i in range(3)]
            refs.append(child.submit(from_driver, 3))
            refs.append(child.submit(mine, 5))
            values = gpupool.get(refs, timeout=30)
            nested = gpupool.get(total.submit([gpupool.put(4), gpupool.put(6), from_driver]), timeout=30)
            # An argument still being computed by a CPU task here: the submit waits for it
            # without holding the interpreter that task needs.
            later = gpupool.get(child.submit(slowly.submit(8), 2), timeout=30)[0]
            # A value made here that names the driver's object.
            inside = gpupool.get(first_of.submit(gpupool.put([from_driver])), timeout=30)
            try:
                child.submit(gpupool.put([gpupool.put(1)]), 1)
                refused = "no"
            except Exception as e:  # noqa: BLE001 - the message is what is checked
                refused = str(e)
            return ([v for v, _ in values], sorted({p for _, p in values}), os.getpid(), refs[0], nested, refused,
                    later, inside)

        values, child_pids, parent_pid, first, nested, refused, later, inside = gpupool.get(
            parent.submit([gpupool.put(7)]), timeout=60)
        print("after a CPU task", later, "inside a value", inside)
        print("values", values)
        print("children elsewhere", parent_pid not in child_pids and len(child_pids) == 1)
        print("first back at the driver", gpupool.get(first, timeout=20)[0])
        print("nested refs", nested)
        print("refused", "holds refs to other objects it made" in refused, refused)
    """, node="elsewhere", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "values [0, 2, 4, 21, 500]" in text, text
    assert "children elsewhere True" in text, text
    assert "first back at the driver 0" in text, text
    assert "nested refs 17" in text, text
    assert "after a CPU task 16 inside a value 7" in text, text
    assert "refused True" in text, text
    # With the driver on node-0, node-0's children run in the driver's own process: the objects
    # the parent made reach them as their values' bytes, read all the same.
    out = run_driver(two_node_pool, """
        import os
        INIT()

        @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
        def total(refs):
            return sum(gpupool.get(refs, timeout=20)), os.getpid()

        @gpupool.remote(gpus=0.5, labels={"node": "node-1"})
        def parent():
            # Defined in the worker's task only: the driver runs it from the export sent along.
            @gpupool.remote(gpus=0.5, labels={"node": "node-0"})
            def made_up_there(x):
                return x + 1, os.getpid()

            return (gpupool.get(total.submit([gpupool.put(4), gpupool.put(6)]), timeout=30),
                    gpupool.get(made_up_there.submit(41), timeout=30))

        (value, pid), (answer, where) = gpupool.get(parent.submit(), timeout=60)
        print("in the driver", value, pid == os.getpid(), answer, where == os.getpid())
    """, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "in the driver 10 True 42 True" in out.stdout, out.stdout
