#!/usr/bin/env python3
"""gpupool's Python no-op task throughput, measured exactly as ray_noop.py measures Ray's.

Run with the interpreter the package was built for: PYTHONPATH=build/python /usr/bin/python3
bench/tasks/python_noop.py [--tasks N] [--sync N]. Prints one JSON object:
  {"tasks", "noop_tasks_per_s", "sync", "sync_round_trips_per_s"}
"""
import argparse
import json
import time

import gpupool


@gpupool.remote
def f():
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--sync", type=int, default=2000)
    a = p.parse_args()
    gpupool.init()
    gpupool.get([f.submit() for _ in range(200)])   # warm-up, as for Ray
    t0 = time.perf_counter()
    refs = [f.submit() for _ in range(a.tasks)]
    gpupool.get(refs)
    t1 = time.perf_counter()
    for _ in range(a.sync):
        gpupool.get(f.submit())
    t2 = time.perf_counter()
    print(json.dumps({"tasks": a.tasks, "noop_tasks_per_s": a.tasks / (t1 - t0),
                      "sync": a.sync, "sync_round_trips_per_s": a.sync / (t2 - t1)}))
    gpupool.shutdown()


if __name__ == "__main__":
    main()
