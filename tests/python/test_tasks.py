"""The Python task API on a simulated embedded pool (2 nodes x 4 H100), in this process."""
import gc
import threading
import time

import pytest

import gpupool

TEAMS = """
teams:
  - name: search
    quotas: [{gpus: H100-80GB, nominal: 2}]
  - name: nlp
    quotas: [{gpus: H100-80GB, nominal: 2}]
"""


@pytest.fixture(scope="module", autouse=True)
def runtime():
    if gpupool.is_initialized():
        gpupool.shutdown()
    gpupool.init(simulate="4xH100-80GB", nodes=2, lease_linger_ms=50)
    yield
    gpupool.shutdown()


@gpupool.remote
def square(x):
    return x * x


@gpupool.remote
def add(a, b=0):
    return a + b


@gpupool.remote(gpus=0.25, gpu_memory_mib=8192, team="search")
def where_am_i(tag):
    ctx = gpupool.context()
    ctx.step()
    return {"tag": tag, "slots": ctx.slots, "budget": ctx.memory_budget_bytes, "team": ctx.team}


@gpupool.remote
def fail(message):
    raise ValueError(message)


gate = threading.Event()


@gpupool.remote
def wait_for_gate():
    while not gate.wait(0.01):
        gpupool.context().step()
    return "through"


@gpupool.remote
def spin_until_cancelled():
    ctx = gpupool.context()
    for _ in range(2000):
        ctx.step()   # raises GpupoolError(CANCELLED) once cancelled
        time.sleep(0.005)
    return "never cancelled"


@gpupool.remote
def leak_context():
    return gpupool.context()


class Unpicklable(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


@gpupool.remote
def fail_unpicklably():
    raise Unpicklable()


def test_submit_and_dependencies():
    a = square.submit(3)
    b = square.submit(a)                   # positional ref: a dependency, receives 9
    c = add.submit(1, b=square.submit(4))  # keyword ref too
    assert gpupool.get(b) == 81
    assert gpupool.get(c) == 17
    assert gpupool.get([a, b]) == [9, 81]
    assert square.remote(5) is not None    # Ray's spelling works
    assert square(6) == 36                 # a direct call runs locally


def test_fractional_gpu_task_sees_its_slot_and_budget():
    result = gpupool.get(where_am_i.submit("x"), timeout=30)
    assert result["tag"] == "x"
    assert result["team"] == "search"
    (slot,) = result["slots"]
    assert slot["kind"] == "fraction"
    assert slot["model"] == "H100-80GB"
    assert slot["compute_share"] == pytest.approx(0.25)
    assert result["budget"] == 8192 << 20
    assert gpupool.context() is None       # outside a task


@gpupool.remote
def collectives_alone():
    import array
    ctx = gpupool.context()
    out = {"rank": (ctx.rank, ctx.ranks)}
    a = array.array("f", [1.5, -2.0])
    ctx.allreduce(a, op="max")
    out["buffer"] = list(a)
    out["list"] = ctx.allreduce([1, 2, 3])
    out["broadcast"] = ctx.broadcast({"k": 1})
    ctx.send(("to", "self"), 0, tag=4)
    out["recv"] = ctx.recv(0, tag=4)
    errors = []
    for bad in (lambda: ctx.allreduce(array.array("b", [1])), lambda: ctx.allreduce(a, op="mean"),
                lambda: ctx.allreduce("text"), lambda: ctx.send(1, 5)):
        try:
            bad()
            errors.append("accepted")
        except gpupool.GpupoolError as e:
            errors.append(e.code)
    out["errors"] = errors
    return out


def test_collectives_in_a_job_of_one_rank():
    out = gpupool.get(collectives_alone.submit(), timeout=30)
    assert out["rank"] == (0, 1)
    assert out["buffer"] == [1.5, -2.0]
    assert out["list"] == [1.0, 2.0, 3.0]
    assert out["broadcast"] == {"k": 1}
    assert out["recv"] == ("to", "self")
    assert out["errors"] == ["INVALID_ARGUMENT"] * 4
    assert gpupool.rank() == (0, 1, "")


def test_several_fractions_share_the_pool():
    refs = [where_am_i.submit(i) for i in range(16)]
    results = gpupool.get(refs, timeout=30)
    assert [r["tag"] for r in results] == list(range(16))


def test_task_exception_keeps_its_type_message_and_traceback():
    ref = fail.submit("bad input 7")
    with pytest.raises(ValueError) as info:
        gpupool.get(ref)
    err = info.value
    assert isinstance(err, gpupool.TaskError)
    assert err.task_name == "fail"
    assert err.location == "cpu"
    assert err.original_message.startswith("ValueError: bad input 7")
    assert "in fail" in err.original_message          # the task's traceback
    assert isinstance(err.cause, ValueError)
    # A dependant fails too, and re-raises the original type.
    with pytest.raises(ValueError):
        gpupool.get(square.submit(ref))


def test_unpicklable_exception_still_reports():
    with pytest.raises(gpupool.TaskError) as info:
        gpupool.get(fail_unpicklably.submit())
    assert "Unpicklable: holds a lock" in str(info.value)
    assert info.value.cause is None


def test_put_get_and_nested_refs_stay_alive():
    assert gpupool.get(gpupool.put({"a": [1, 2.5, "x"]})) == {"a": [1, 2.5, "x"]}
    inner = square.submit(7)
    outer = gpupool.put({"inner": [inner]})
    inner_id = inner.id
    del inner
    gc.collect()
    (ref,) = gpupool.get(outer)["inner"]
    assert ref.id == inner_id
    assert gpupool.get(ref) == 49


def test_wait_and_timeouts():
    gate.clear()
    slow = wait_for_gate.submit()
    fast = square.submit(2)
    ready, not_ready = gpupool.wait([slow, fast], num_returns=1, timeout=10)
    assert ready == [fast] and not_ready == [slow]
    with pytest.raises(gpupool.GpupoolError) as info:
        gpupool.get(slow, timeout=0.05)
    assert info.value.code == "DEADLINE_EXCEEDED"
    gate.set()
    assert gpupool.get(slow, timeout=10) == "through"
    with pytest.raises(ValueError):
        gpupool.wait([fast], num_returns=2)


def test_cancel_running_task():
    ref = spin_until_cancelled.submit()
    time.sleep(0.05)
    gpupool.cancel(ref)
    with pytest.raises(gpupool.TaskError) as info:
        gpupool.get(ref, timeout=20)
    assert info.value.code == "CANCELLED"


def test_context_cannot_leave_its_task():
    with pytest.raises(gpupool.TaskError) as info:   # a TaskContext is not a value
        gpupool.get(leak_context.submit())
    assert "pickle" in str(info.value)


def test_bad_requests_name_what_is_wrong():
    with pytest.raises(TypeError, match="unknown task option"):
        square.options(gpu=1)
    with pytest.raises(gpupool.GpupoolError) as info:
        square.options(gpus=-1)
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(gpupool.TaskError) as info:
        gpupool.get(square.options(gpus=64).submit(1), timeout=30)
    assert "does not fit" in str(info.value)
    with pytest.raises(gpupool.TaskError) as info:
        gpupool.get(square.options(models=["L4"], gpus=1).submit(1), timeout=30)
    assert "matches no GPU" in str(info.value)
    with pytest.raises(TypeError):
        gpupool.get(42)
    # Host cores and memory belong to a GPU task's lease: a CPU task refuses them, saying so; on
    # nodes that declare none they are not counted, and the task runs.
    with pytest.raises(gpupool.TaskError) as info:
        gpupool.get(square.options(cpus=2).submit(1), timeout=30)
    assert "a CPU task" in str(info.value)
    assert gpupool.get(square.options(gpus=1, cpus=4, host_memory_mib=1024).submit(5), timeout=30) == 25
    assert gpupool.get(square.submit(3)) == 9      # still serving


def test_objects_are_freed():
    gc.collect()
    before = gpupool.stats()["live_objects"]
    refs = [square.submit(i) for i in range(5000)]
    assert sum(gpupool.get(refs)) == sum(i * i for i in range(5000))
    del refs
    gc.collect()
    deadline = time.time() + 10
    while gpupool.stats()["live_objects"] > before and time.time() < deadline:
        time.sleep(0.01)
    assert gpupool.stats()["live_objects"] <= before


def test_one_runtime_per_process_and_restart():
    with pytest.raises(gpupool.GpupoolError) as info:
        gpupool.init()
    assert info.value.code == "FAILED_PRECONDITION"
    gpupool.shutdown()
    assert not gpupool.is_initialized()
    with pytest.raises(gpupool.GpupoolError, match="unknown key 'quota'"):
        gpupool.init(config_text="teams:\n  - name: x\n    quota: 3\n")
    assert not gpupool.is_initialized()
    gpupool.init(simulate="4xH100-80GB", config_text=TEAMS, lease_linger_ms=50)
    ref = where_am_i.submit("after restart")
    assert gpupool.get(ref, timeout=30)["team"] == "search"
    usage = {t["team"]: t for t in gpupool.stats()["teams"]}
    assert usage["search"]["tasks_run"] == 1
    assert usage["search"]["leases"] >= 1


CHECKPOINT_TEAMS = """
model_groups:
  gpus: [H100-80GB]
teams:
  - name: owner
    quotas: [{gpus: gpus, nominal: 1}]
  - name: borrower
    quotas: [{gpus: gpus, nominal: 0, borrowing_limit: 1}]
"""

progress = {"step": 0}


@gpupool.remote(gpus=1, team="borrower")
def train(steps):
    ctx = gpupool.context()
    state = {"total": 0}

    def restore(saved):
        state.update(saved)

    first = ctx.checkpointable(lambda: dict(state), restore)
    for s in range(first, steps):
        state["total"] += s
        progress["step"] = s + 1
        time.sleep(0.002)
        ctx.step()
    return state["total"], ctx.resumed


@gpupool.remote(gpus=1, team="owner")
def hold():
    time.sleep(0.05)
    return "held"


def test_preempted_python_task_resumes_from_its_snapshot(tmp_path, monkeypatch):
    gpupool.shutdown()
    monkeypatch.setenv("GPUPOOL_CHECKPOINT_DIR", str(tmp_path))
    gpupool.init(simulate="1xH100-80GB", config_text=CHECKPOINT_TEAMS, clock_speed=100,
                 lease_linger_ms=20)
    progress["step"] = 0
    job = train.submit(1000)
    deadline = time.time() + 30
    while progress["step"] < 200 and time.time() < deadline:
        time.sleep(0.005)
    assert gpupool.get(hold.submit(), timeout=30) == "held"   # the owner reclaims its GPU
    total, resumed = gpupool.get(job, timeout=60)
    assert total == sum(range(1000))
    assert resumed
    usage = {t["team"]: t for t in gpupool.stats()["teams"]}
    assert usage["borrower"]["preemptions"] == 1
    assert usage["borrower"]["snapshots"] >= 1
