#!/usr/bin/env python3
"""Ray's remote no-op tasks on a two-node cluster, the comparison for bench/run remote (issue 21).

Two Ray nodes on this machine (ray.cluster_utils.Cluster: a head and a second node, one CPU and
500 MB of object store each, no dashboard); the driver is on the head and every task requires a
custom resource only the second node has, so each runs in a worker on the other node, as
remote_bench's do. Measured as remote_bench measures: async (submit all, then get all) tasks/s and
sync round trips/s (submit, get, one at a time), after a warm-up that starts the worker.

Runs in bench/run's own venv (build/bench-venv); Ray is never a dependency of gpupool's build or
tests. Prints one JSON object:
  {"ray_version", "nodes", "tasks", "noop_tasks_per_s", "sync", "sync_round_trips_per_s"}
or {"error": "..."} and exits 1.
  python ray_remote.py [--tasks N] [--sync N]
"""
import argparse
import json
import sys
import time

OBJECT_STORE_BYTES = 500 * 1024 * 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--sync", type=int, default=2000)
    a = p.parse_args()
    try:
        import ray
        from ray.cluster_utils import Cluster
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": "import ray: %s" % e}))
        return 1
    node_args = {"num_cpus": 1, "object_store_memory": OBJECT_STORE_BYTES}
    cluster = None
    try:
        cluster = Cluster(initialize_head=True,
                          head_node_args=dict(node_args, include_dashboard=False))
        cluster.add_node(**node_args, resources={"other_node": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": "two-node cluster: %s" % str(e).splitlines()[0][:200]}))
        if cluster is not None:
            cluster.shutdown()
        return 1

    # A sliver of the resource, so tasks are never held back by it (the CPU is what limits them,
    # as one GPU does for remote_bench's tasks).
    @ray.remote(resources={"other_node": 0.001})
    def f(x):
        return x

    try:
        here = ray.get_runtime_context().get_node_id()
        there = ray.get(ray.remote(resources={"other_node": 0.001})(
            lambda: ray.get_runtime_context().get_node_id()).remote())
        if here == there:
            raise RuntimeError("the tasks ran on the driver's node")
        ray.get([f.remote(i) for i in range(1000)])  # warm-up: the worker on the other node starts
        t0 = time.perf_counter()
        ray.get([f.remote(i) for i in range(a.tasks)])
        t1 = time.perf_counter()
        for i in range(a.sync):
            ray.get(f.remote(i))
        t2 = time.perf_counter()
        out = {
            "ray_version": ray.__version__,
            "nodes": len(ray.nodes()),
            "tasks": a.tasks,
            "noop_tasks_per_s": a.tasks / (t1 - t0),
            "sync": a.sync,
            "sync_round_trips_per_s": a.sync / (t2 - t1),
        }
    except Exception as e:  # noqa: BLE001
        out = {"error": "tasks: %s" % str(e).splitlines()[0][:200]}
    ray.shutdown()
    cluster.shutdown()
    print(json.dumps(out))
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
