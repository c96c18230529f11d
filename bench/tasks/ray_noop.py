#!/usr/bin/env python3
"""Ray's no-op task throughput, the comparison for bench/tasks (issue 4, "Targets").

Runs in its own virtual environment (bench/run tasks makes build/bench-venv); Ray is never a
dependency of gpupool's build or tests. Prints one JSON object:
  {"ray_version", "tasks", "noop_tasks_per_s", "sync", "sync_round_trips_per_s", "num_cpus"}
or {"error": "..."} and exits 1.
  python ray_noop.py [--tasks N] [--sync N] [--num-cpus N]
"""
import argparse
import json
import os
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--sync", type=int, default=2000)
    p.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1)
    a = p.parse_args()
    try:
        import ray
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": "import ray: %s" % e}))
        return 1
    try:
        ray.init(num_cpus=a.num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": "ray.init: %s" % str(e).splitlines()[0][:200]}))
        return 1

    @ray.remote
    def f():
        return None

    # warm-up: start the workers
    ray.get([f.remote() for _ in range(200)])
    t0 = time.perf_counter()
    refs = [f.remote() for _ in range(a.tasks)]
    ray.get(refs)
    t1 = time.perf_counter()
    for _ in range(a.sync):
        ray.get(f.remote())
    t2 = time.perf_counter()
    out = {
        "ray_version": ray.__version__,
        "tasks": a.tasks,
        "noop_tasks_per_s": a.tasks / (t1 - t0),
        "sync": a.sync,
        "sync_round_trips_per_s": a.sync / (t2 - t1),
        "num_cpus": a.num_cpus,
    }
    ray.shutdown()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
