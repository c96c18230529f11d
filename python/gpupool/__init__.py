"""gpupool: one pool of GPUs shared by many teams.

    import gpupool
    pool = gpupool.describe_pool(simulate="4xH100-80GB,2xL4")
    for node in pool["nodes"]:
        for gpu in node["gpus"]:
            print(node["name"], gpu["index"], gpu["model"], gpu["health"])

Errors raise gpupool.GpupoolError, whose `code` names the kind of failure
("INVALID_ARGUMENT", "UNAVAILABLE", ...). The task API (remote functions, submit, get) joins
this package as the runtime grows.
"""

from ._gpupool_core import GpupoolError, version
from ._gpupool_core import describe_pool as _describe_pool

__all__ = ["GpupoolError", "describe_pool", "version"]
__version__ = version()


def describe_pool(driver: str = "", simulate: str = "", node_count: int = 1, config: str = ""):
    """Return the pool's nodes and GPUs as a dict (the same content as `gpupool devices --json`).

    driver: "nvidia", "simulated" or "" (real GPUs when present, otherwise simulated).
    simulate: GPUs of one simulated node, COUNTxMODEL[,COUNTxMODEL...], e.g. "4xH100-80GB,2xL4".
    node_count: how many such nodes.
    config: path of a YAML pool configuration.
    """
    return _describe_pool(driver=driver, simulate=simulate, node_count=node_count, config=config)
