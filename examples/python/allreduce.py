"""Data-parallel averaging across the ranks of an mpirun job, in Python.

    mpirun --allow-run-as-root --oversubscribe --enable-recovery -np 4 \\
        env PYTHONPATH=build/python python3 examples/python/allreduce.py

Every rank runs one task on its node's (simulated) GPU: it computes a gradient on its shard,
allreduces it in place (any writable float32/float64/int32/int64 buffer: numpy arrays, array.array),
and checks every rank got the same average; rank 0 then broadcasts a Python object to all.
"""
import array
import sys

import gpupool


@gpupool.remote(gpus=0.5)
def average_gradient(steps):
    ctx = gpupool.context()
    grad = array.array("d", [0.0] * 8)
    for step in range(steps):
        for i in range(len(grad)):
            grad[i] = (ctx.rank + 1) * (i + step)   # this rank's shard's gradient
        ctx.allreduce(grad)                           # summed over the ranks, in place
    mean = [g / ctx.ranks for g in grad]
    config = ctx.broadcast({"lr": 0.1, "from": ctx.rank} if ctx.rank == 0 else None, root=0)
    return mean, config


rank, ranks, node = gpupool.rank()
mean, config = gpupool.get(average_gradient.submit(100))
expected = [(ranks + 1) / 2 * (i + 99) for i in range(8)]
ok = mean == expected and config == {"lr": 0.1, "from": 0}
# One write per line, flushed: mpirun interleaves the ranks' output by the chunk.
sys.stdout.write(f"rank {rank} of {ranks} on {node}: mean gradient {mean[:3]}..., config {config}: "
                 f"{'ok' if ok else 'WRONG'}\n")
sys.stdout.flush()
raise SystemExit(0 if ok else 1)
