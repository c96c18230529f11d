"""ObjectRefs inside Python values cross the ranks of an mpirun job: rank 0 broadcasts a dict
holding refs to a put() value and to a task result still running, and sends a list of refs to
rank 1; the other ranks get() them (fetched from rank 0 over UCX) and pass them to their own
tasks, as in C++ (runtime/objects/object_exchange.h). Objects broadcast every step are freed once
every rank has them."""
import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = r"""
import sys, time
import numpy as np
import gpupool

@gpupool.remote
def slow_square(x):
    time.sleep(0.3)
    return x * x

@gpupool.remote
def total(arr):
    return float(arr.sum())

@gpupool.remote
def exchange():
    ctx = gpupool.context()
    shared = None
    if ctx.rank == 0:
        shared = {"table": gpupool.put(np.arange(100000, dtype=np.float64)), "pending": slow_square.submit(12)}
    shared = ctx.broadcast(shared, root=0)
    if ctx.rank == 0:
        ctx.send([gpupool.put("for rank 1 only"), shared["pending"]], dst=1, tag=5)
    extra = ctx.recv(0, tag=5) if ctx.rank == 1 else None
    # Used here: fetched from rank 0, then a task of this rank takes the table as its argument.
    table_sum = gpupool.get(total.submit(shared["table"]))
    pending = gpupool.get(shared["pending"])
    said = f"sum {table_sum:.0f}, pending {pending}"
    if extra is not None:
        said += f", extra {gpupool.get(extra[0])!r} {gpupool.get(extra[1])}"
    # A fresh object broadcast every step is freed once every rank has it (receipts): live
    # objects come back to where they were on every rank.
    before = gpupool.stats()["live_objects"]
    for step in range(20):
        ref = ctx.broadcast(gpupool.put(np.full(4096, step)) if ctx.rank == 0 else None, root=0)
        assert gpupool.get(ref)[7] == step
        del ref
    ctx.allreduce([1.0])
    give_up = time.time() + 20
    while gpupool.stats()["live_objects"] > before and time.time() < give_up:
        time.sleep(0.01)
    said += f", freed {'yes' if gpupool.stats()['live_objects'] <= before else 'no'}"
    ctx.allreduce([1.0])  # every rank is done reading before rank 0 may stop serving
    return said

rank, ranks, node = gpupool.rank()
sys.stdout.write(f"rank {rank}: {gpupool.get(exchange.submit())}\n")
sys.stdout.flush()
"""


def test_refs_inside_python_values_cross_ranks(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed")
    script = tmp_path / "objects.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMPI_MCA_btl="self,vader,tcp", OMPI_MCA_btl_tcp_if_include="lo",
               OMPI_MCA_oob_tcp_if_include="lo")
    run = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "--enable-recovery", "-np", "3",
                          sys.executable, str(script), "--gpupool-simulate", "1xH100-80GB"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    expected_sum = f"sum {sum(range(100000))}"
    for r in range(3):
        line = next((l for l in run.stdout.splitlines() if l.startswith(f"rank {r}: ")), None)
        assert line is not None, run.stdout + run.stderr
        assert f"{expected_sum}, pending 144" in line, line
        assert "freed yes" in line, line
    assert "extra 'for rank 1 only' 144" in run.stdout, run.stdout
