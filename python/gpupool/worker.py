"""A worker process of a gpupool job: `python -m gpupool.worker --gpupool-worker ...`.

A node's agent starts it on the head's word when the job's driver (elsewhere) holds a lease on
this node; the flags say where the driver listens, and the job's key arrives on an inherited file
descriptor. It serves the driver's tasks (functions cloudpickled by the driver) until the driver
stops it or it has been idle for the driver's worker_linger_ms, then the process ends. Not for
direct use.
"""

import sys

from . import _gpupool_core as _core

if __name__ == "__main__":
    _core._serve_worker(sys.argv[1:])   # never returns
