"""gpupool: one pool of GPUs shared by many teams.

    import gpupool
    pool = gpupool.describe_pool(simulate="4xH100-80GB,2xL4")
    for node in pool["nodes"]:
        for gpu in node["gpus"]:
            print(node["name"], gpu["index"], gpu["model"], gpu["health"])

Tasks run on the pool (an embedded one over this machine's GPUs, simulated when it has none):

    @gpupool.remote
    def square(x):
        return x * x

    @gpupool.remote(gpus=0.25, gpu_memory_mib=8192, team="search")
    def score(batch):
        ctx = gpupool.context()          # slots, memory budget, step(), cancelled
        return batch[0]

    a = square.submit(3)
    b = square.submit(a)                 # an ObjectRef argument is a dependency
    print(gpupool.get(b), gpupool.get(score.submit([0.5, 1.0])))   # 81 0.5

Errors raise gpupool.GpupoolError, whose `code` names the kind of failure
("INVALID_ARGUMENT", "UNAVAILABLE", ...); a failed task raises gpupool.TaskError, which is also an
instance of the task's own exception type.
"""

from ._gpupool_core import GpupoolError, version
from ._gpupool_core import describe_pool as _describe_pool
from ._tasks import (ObjectRef, RemoteFunction, TaskContext, TaskError, cancel, context, get,
                     init, is_initialized, put, rank, remote, shutdown, stats, wait)

__all__ = ["GpupoolError", "ObjectRef", "RemoteFunction", "TaskContext", "TaskError", "cancel",
           "context", "describe_pool", "get", "init", "is_initialized", "put", "rank", "remote",
           "shutdown", "stats", "version", "wait"]
__version__ = version()


def describe_pool(driver: str = "", simulate: str = "", node_count: int = 1, config: str = ""):
    """Return the pool's nodes and GPUs as a dict (the same content as `gpupool devices --json`).

    driver: "nvidia", "simulated" or "" (real GPUs when present, otherwise simulated).
    simulate: GPUs of one simulated node, COUNTxMODEL[,COUNTxMODEL...], e.g. "4xH100-80GB,2xL4".
    node_count: how many such nodes.
    config: path of a YAML pool configuration.
    """
    return _describe_pool(driver=driver, simulate=simulate, node_count=node_count, config=config)
