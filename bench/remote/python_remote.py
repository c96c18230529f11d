#!/usr/bin/env python3
"""gpupool's remote no-op tasks from a Python driver, measured as ray_remote.py measures Ray's.

A real `gpupool head` over two nodes of two simulated GPUs and an agent per node, on loopback;
the driver joins as node-0 and every task requires node-1 (one GPU: one lease, its tasks one after
another, as Ray's one-CPU second node runs them), so each runs in the job's Python worker there.
Async (submit all, then get all) tasks/s and sync round trips/s, after a warm-up that starts the
worker. Prints rows "metric value unit" (or --json lines) for bench/run remote.

  PYTHONPATH=build/python /usr/bin/python3 bench/remote/python_remote.py CLI [--tasks N] [--sync N] [--json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import gpupool

TOKEN = "bench-team-token-0123456789"
AGENT_TOKEN = "bench-agent-token-0123456789"


@gpupool.remote(gpus=1, labels={"node": "node-1"})
def noop():
    return None


def start_pool(cli, tmp):
    with open(os.path.join(tmp, "tokens"), "w") as f:
        f.write("default: %s\nagents: %s\n" % (TOKEN, AGENT_TOKEN))
    with open(os.path.join(tmp, "agent.token"), "w") as f:
        f.write(AGENT_TOKEN + "\n")
    log = open(os.path.join(tmp, "daemons.log"), "w")
    port_file = os.path.join(tmp, "port")
    procs = [subprocess.Popen([cli, "head", "--simulate", "2xH100-80GB", "--node-count", "2", "--tokens",
                               os.path.join(tmp, "tokens"), "--listen", "127.0.0.1:0", "--port-file", port_file],
                              stdout=log, stderr=subprocess.STDOUT)]
    for _ in range(200):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.05)
    port = open(port_file).read().strip()
    for node in ("node-0", "node-1"):
        procs.append(subprocess.Popen([cli, "agent", "--head", "127.0.0.1:" + port, "--node", node, "--simulate",
                                       "2xH100-80GB", "--token-file", os.path.join(tmp, "agent.token"),
                                       "--allow-root-workers"], stdout=log, stderr=subprocess.STDOUT))
    time.sleep(1.0)
    return port, procs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cli")
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--sync", type=int, default=2000)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port, procs = start_pool(a.cli, tmp)
        try:
            gpupool.init(address="127.0.0.1:" + port, token=TOKEN, node="node-0")
            gpupool.get([noop.submit() for _ in range(200)])   # warm-up: the worker starts
            t0 = time.perf_counter()
            gpupool.get([noop.submit() for _ in range(a.tasks)])
            t1 = time.perf_counter()
            for _ in range(a.sync):
                gpupool.get(noop.submit())
            t2 = time.perf_counter()
            gpupool.shutdown()
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    rows = [("python_remote_noop_tasks_per_s", a.tasks / (t1 - t0), "tasks/s"),
            ("python_remote_sync_round_trips_per_s", a.sync / (t2 - t1), "1/s")]
    for metric, value, unit in rows:
        if a.json:
            print(json.dumps({"bench": "remote", "metric": metric, "value": round(value, 4), "unit": unit}))
        else:
            print("%-36s %14.2f %-8s  Python driver on node-0, tasks in its worker on node-1" % (metric, value, unit))


if __name__ == "__main__":
    sys.exit(main())
